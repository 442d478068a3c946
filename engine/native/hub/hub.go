// Package hub downloads model repositories from the Hugging Face Hub (or a
// server speaking the same HTTP API) into a local cache, for "batchd pull".
//
// A pull lists the files of a revision through the Hub API, resolves the
// revision to its commit sha, and downloads the wanted files into
// {CacheDir}/{org}--{name}/{sha}/{path}. Each file is written to
// {path}.partial, fsynced and renamed into place only once its size (and
// sha256, when the server or the API publish one) has been verified, so a file
// present under its final name is complete: pulling again downloads nothing
// that is already there. An interrupted download is resumed with a Range
// request, both within a pull (transient errors are retried with backoff) and
// across pulls.
//
// Concurrent pulls of the same repository by different processes are not
// coordinated and may interfere with each other's .partial files.
package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// DefaultBaseURL is the Hugging Face Hub.
const DefaultBaseURL = "https://huggingface.co"

// Errors a pull can be tested for with errors.Is.
var (
	// ErrUnauthorized: the server answered 401 or 403; the repository is
	// gated or private and needs a token with access.
	ErrUnauthorized = errors.New("gated or private: set HF_TOKEN")
	// ErrNotFound: the server answered 404 for the repository, the
	// revision or a file.
	ErrNotFound = errors.New("no such repo or revision")
	// ErrChecksum: a downloaded file did not match its published size or
	// sha256.
	ErrChecksum = errors.New("checksum mismatch")
)

// Client pulls repositories. The zero value is ready to use.
type Client struct {
	// BaseURL is the Hub's address; empty means DefaultBaseURL.
	BaseURL string
	// Token is sent as "Authorization: Bearer {Token}". When empty the
	// HF_TOKEN environment variable is used, as the Hub's own tools do.
	Token string
	// HTTP is the client requests are made with. When nil, a client
	// without an overall timeout (downloads take as long as they take)
	// but with connect, TLS and response-header timeouts is used.
	HTTP *http.Client
	// CacheDir is the root of the model cache; empty means
	// $XDG_CACHE_HOME/batchd/models, or ~/.cache/batchd/models when
	// XDG_CACHE_HOME is unset.
	CacheDir string
	// Logger receives progress and retry messages; nil means
	// slog.Default().
	Logger *slog.Logger
	// Progress, when set, is called as a file downloads with the bytes of
	// it present so far and its size (-1 when unknown): once when the
	// download starts, about every MiB, and once when it completes. Files
	// download concurrently, so Progress may be called from several
	// goroutines at once.
	Progress func(file string, done, total int64)

	// Knobs for tests; zero values mean the defaults below.
	retries      int           // attempts per request without progress (default 5)
	backoff      time.Duration // first retry delay, doubled each time (default 1s)
	maxBackoff   time.Duration // retry delay cap (default 30s)
	stallTimeout time.Duration // abort an attempt with no data for this long (default 60s)
	parallel     int           // files downloaded at once (default 4)
}

// DefaultInclude is the file filter used when Pull is given none: JSON
// (config, tokenizer, index), safetensors weights, SentencePiece
// tokenizer.model and text files (merges, vocab, licenses).
func DefaultInclude(p string) bool {
	base := path.Base(p)
	switch {
	case strings.HasSuffix(base, ".json"),
		strings.HasSuffix(base, ".safetensors"),
		strings.HasSuffix(base, ".txt"),
		base == "tokenizer.model":
		return true
	}
	return false
}

// repoRE is ORG/NAME as the Hub allows them.
var repoRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)

// shaRE is a commit id as returned by the API.
var shaRE = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// repoInfo is the part of GET /api/models/{repo}/revision/{rev} used here.
type repoInfo struct {
	SHA      string `json:"sha"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
		// With ?blobs=true the Hub adds the size of every file, and for
		// files stored in LFS their sha256.
		Size *int64 `json:"size"`
		LFS  *struct {
			SHA256 string `json:"sha256"`
			Size   int64  `json:"size"`
		} `json:"lfs"`
	} `json:"siblings"`
}

// remoteFile is one file to download.
type remoteFile struct {
	path   string // repository path, validated
	size   int64  // from the API, -1 if unknown
	sha256 string // from the API, "" if unknown
}

// Pull downloads the files of repo ("ORG/NAME") at revision (a branch, tag
// or commit; empty means "main") for which include returns true (nil means
// DefaultInclude), and returns the directory holding them:
// {CacheDir}/{org}--{name}/{commit sha}.
func (c *Client) Pull(ctx context.Context, repo, revision string, include func(path string) bool) (dir string, err error) {
	if !repoRE.MatchString(repo) || strings.Contains(repo, "..") {
		return "", fmt.Errorf("hub: pull %q: repository must be ORG/NAME", repo)
	}
	if revision == "" {
		revision = "main"
	}
	if include == nil {
		include = DefaultInclude
	}
	log := c.logger().With("repo", repo, "revision", revision)

	info, err := c.repoInfo(ctx, repo, revision)
	if err != nil {
		return "", fmt.Errorf("hub: pull %s@%s: %w", repo, revision, err)
	}
	files, err := selectFiles(info, include)
	if err != nil {
		return "", fmt.Errorf("hub: pull %s@%s: %w", repo, revision, err)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("hub: pull %s@%s: none of the %d files in the repository was selected", repo, revision, len(info.Siblings))
	}

	cache, err := c.cacheDir()
	if err != nil {
		return "", fmt.Errorf("hub: pull %s: %w", repo, err)
	}
	org, name, _ := strings.Cut(repo, "/")
	dir = filepath.Join(cache, org+"--"+name, info.SHA)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("hub: pull %s: %w", repo, err)
	}
	log.Info("pulling model", "sha", info.SHA, "files", len(files), "dir", dir)

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.parallelism())
	for _, f := range files {
		g.Go(func() error {
			if err := c.fetch(gctx, log, repo, info.SHA, dir, f); err != nil {
				return fmt.Errorf("hub: pull %s@%s: %s: %w", repo, revision, f.path, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return "", err
	}
	log.Info("pulled model", "sha", info.SHA, "dir", dir)
	return dir, nil
}

// selectFiles validates every file name in the listing (a listing with an
// unsafe name is rejected whole) and returns the included files.
func selectFiles(info *repoInfo, include func(string) bool) ([]remoteFile, error) {
	var files []remoteFile
	seen := make(map[string]bool, len(info.Siblings))
	for _, s := range info.Siblings {
		if err := checkPath(s.RFilename); err != nil {
			return nil, err
		}
		if seen[s.RFilename] || !include(s.RFilename) {
			continue
		}
		seen[s.RFilename] = true
		f := remoteFile{path: s.RFilename, size: -1}
		if s.Size != nil && *s.Size >= 0 {
			f.size = *s.Size
		}
		if s.LFS != nil {
			if isSHA256(s.LFS.SHA256) {
				f.sha256 = strings.ToLower(s.LFS.SHA256)
			}
			if s.LFS.Size > 0 {
				f.size = s.LFS.Size
			}
		}
		files = append(files, f)
	}
	return files, nil
}

// checkPath rejects repository file names that could escape the model
// directory or that this package could not store faithfully.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("repository lists a file with an empty name")
	case strings.ContainsAny(p, "\\\x00"):
		return fmt.Errorf("unsafe file name %q in repository listing: backslash or NUL", p)
	case strings.HasPrefix(p, "/") || filepath.IsAbs(p):
		return fmt.Errorf("unsafe file name %q in repository listing: absolute path", p)
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "..":
			return fmt.Errorf("unsafe file name %q in repository listing: path traversal", p)
		case "", ".":
			return fmt.Errorf("unsafe file name %q in repository listing: not a clean path", p)
		}
	}
	if !filepath.IsLocal(filepath.FromSlash(p)) {
		return fmt.Errorf("unsafe file name %q in repository listing", p)
	}
	if strings.HasSuffix(p, partialSuffix) {
		return fmt.Errorf("file name %q in repository listing collides with download files", p)
	}
	return nil
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func (c *Client) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

func (c *Client) cacheDir() (string, error) {
	if c.CacheDir != "" {
		return c.CacheDir, nil
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "batchd", "models"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("locating the model cache: %w", err)
	}
	return filepath.Join(home, ".cache", "batchd", "models"), nil
}

func (c *Client) baseURL() string {
	if c.BaseURL != "" {
		return strings.TrimRight(c.BaseURL, "/")
	}
	return DefaultBaseURL
}

func (c *Client) token() string {
	if c.Token != "" {
		return c.Token
	}
	return os.Getenv("HF_TOKEN")
}

var defaultHTTP = &http.Client{Transport: func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 60 * time.Second
	return t
}()}

// httpClient returns the client to use: c.HTTP or the default, changed to
// drop the Authorization header when a redirect leaves the Hub's host (the
// Hub redirects LFS downloads to presigned CDN URLs, which must not get the
// token and may reject requests carrying a second credential).
func (c *Client) httpClient() *http.Client {
	base := c.HTTP
	if base == nil {
		base = defaultHTTP
	}
	hc := *base
	check := base.CheckRedirect
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Host != via[0].URL.Host {
			req.Header.Del("Authorization")
		}
		if check != nil {
			return check(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &hc
}

func (c *Client) parallelism() int {
	if c.parallel > 0 {
		return c.parallel
	}
	return 4
}

func (c *Client) newRequest(ctx context.Context, rawURL string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "batchd-hub/1")
	if tok := c.token(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req, nil
}

// repoInfo fetches the file listing of a revision.
func (c *Client) repoInfo(ctx context.Context, repo, revision string) (*repoInfo, error) {
	u := c.baseURL() + "/api/models/" + repo + "/revision/" + url.PathEscape(revision) + "?blobs=true"
	var info *repoInfo
	err := c.retry(ctx, c.logger().With("repo", repo, "revision", revision), "list files", func(ctx context.Context) (bool, error) {
		req, err := c.newRequest(ctx, u)
		if err != nil {
			return false, err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := c.httpClient().Do(req)
		if err != nil {
			return false, requestError(ctx, err)
		}
		defer resp.Body.Close()
		if err := c.statusError(resp); err != nil {
			return false, err
		}
		var ri repoInfo
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&ri); err != nil {
			return false, transient(fmt.Errorf("decoding the file listing: %w", err))
		}
		info = &ri
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	if !shaRE.MatchString(info.SHA) {
		return nil, fmt.Errorf("file listing has no valid commit sha (got %q)", info.SHA)
	}
	return info, nil
}

// httpStatusError is a response status that is not success.
type httpStatusError struct {
	code       int
	msg        string
	kind       error // ErrUnauthorized, ErrNotFound or nil
	hint       string
	retryAfter time.Duration
}

func (e *httpStatusError) Error() string {
	s := fmt.Sprintf("HTTP %d %s", e.code, http.StatusText(e.code))
	if e.msg != "" {
		s += ": " + e.msg
	}
	if e.kind != nil {
		s = e.kind.Error() + " (" + s + ")"
	}
	if e.hint != "" {
		s += "; " + e.hint
	}
	return s
}

func (e *httpStatusError) Unwrap() error { return e.kind }

// retryable reports whether the status is worth another attempt.
func (e *httpStatusError) retryable() bool {
	return e.code >= 500 || e.code == http.StatusTooManyRequests || e.code == http.StatusRequestTimeout
}

// statusError turns a non-2xx response into an error.
func (c *Client) statusError(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	e := &httpStatusError{code: resp.StatusCode}
	// The Hub explains refusals in X-Error-Message or a JSON body.
	e.msg = resp.Header.Get("X-Error-Message")
	if e.msg == "" {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		var j struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &j) == nil && j.Error != "" {
			e.msg = j.Error
		}
	}
	if len(e.msg) > 300 {
		e.msg = e.msg[:300] + "..."
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		e.kind = ErrUnauthorized
		if c.token() != "" {
			e.hint = "the token in use has no access (for a gated model, accept its conditions on the model page)"
		} else if resp.StatusCode == http.StatusUnauthorized {
			e.hint = "the Hub also answers 401 for repositories that do not exist"
		}
	case http.StatusNotFound:
		e.kind = ErrNotFound
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.retryAfter = time.Duration(secs) * time.Second
	}
	return e
}
