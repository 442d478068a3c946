package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const testSHA = "0123456789abcdef0123456789abcdef01234567"

// fakeHub is a loopback server speaking the part of the Hub API Pull uses.
// Files marked LFS are served like the Hub serves them: /resolve/ answers
// with a redirect to a CDN URL carrying X-Linked-Size and X-Linked-Etag (the
// sha256), and the CDN serves the bytes (with Range support).
type fakeHub struct {
	t      *testing.T
	srv    *httptest.Server
	cdnSrv *httptest.Server
	order  []string
	files  map[string][]byte
	lfs    map[string]bool

	token     string            // when set, required as Bearer token
	blobs     bool              // add size and lfs.sha256 to the listing
	apiStatus int               // when set, the API answers with it
	siblings  []string          // extra names listed (not served)
	badETag   map[string]string // X-Linked-Etag override
	// hook may take over a content request; it returns true if it did.
	// n is the 1-based number of the request for that path.
	hook func(w http.ResponseWriter, r *http.Request, path string, n int) bool

	mu       sync.Mutex
	apiCalls int
	gets     map[string]int      // content requests per path
	ranges   map[string][]string // Range header of each content request
	auth     []string            // Authorization of each API and resolve request
	cdnAuth  []string            // Authorization of each CDN request
}

func newFakeHub(t *testing.T) *fakeHub {
	h := &fakeHub{
		t:       t,
		files:   map[string][]byte{},
		lfs:     map[string]bool{},
		badETag: map[string]string{},
		gets:    map[string]int{},
		ranges:  map[string][]string{},
	}
	h.srv = httptest.NewServer(http.HandlerFunc(h.route))
	t.Cleanup(h.srv.Close)
	// The CDN is another host, as for the Hub.
	h.cdnSrv = httptest.NewServer(http.HandlerFunc(h.cdn))
	t.Cleanup(h.cdnSrv.Close)
	return h
}

// route dispatches GET /api/models/{org}/{name}/revision/{rev} and
// GET /{org}/{name}/resolve/{rev}/{path...}.
func (h *fakeHub) route(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	segs := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch {
	case len(segs) == 6 && segs[0] == "api" && segs[1] == "models" && segs[4] == "revision":
		r.SetPathValue("org", segs[2])
		r.SetPathValue("name", segs[3])
		r.SetPathValue("rev", segs[5])
		h.api(w, r)
	case len(segs) >= 5 && segs[2] == "resolve":
		r.SetPathValue("rev", segs[3])
		r.SetPathValue("path", strings.Join(segs[4:], "/"))
		h.resolve(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (h *fakeHub) add(path string, data []byte, lfs bool) {
	h.order = append(h.order, path)
	h.files[path] = data
	h.lfs[path] = lfs
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (h *fakeHub) authorized(w http.ResponseWriter, r *http.Request) bool {
	h.mu.Lock()
	h.auth = append(h.auth, r.Header.Get("Authorization"))
	h.mu.Unlock()
	if h.token != "" && r.Header.Get("Authorization") != "Bearer "+h.token {
		w.Header().Set("X-Error-Message", "Access to model org/model is restricted.")
		http.Error(w, `{"error":"Access to model org/model is restricted."}`, http.StatusUnauthorized)
		return false
	}
	return true
}

func (h *fakeHub) api(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.apiCalls++
	h.mu.Unlock()
	if !h.authorized(w, r) {
		return
	}
	if h.apiStatus != 0 {
		w.WriteHeader(h.apiStatus)
		fmt.Fprint(w, `{"error":"Repository Not Found"}`)
		return
	}
	type lfs struct {
		SHA256 string `json:"sha256"`
		Size   int    `json:"size"`
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
		Size      *int   `json:"size,omitempty"`
		LFS       *lfs   `json:"lfs,omitempty"`
	}
	var sibs []sibling
	for _, p := range h.order {
		s := sibling{RFilename: p}
		if h.blobs {
			n := len(h.files[p])
			s.Size = &n
			if h.lfs[p] {
				s.LFS = &lfs{SHA256: sha256Hex(h.files[p]), Size: n}
			}
		}
		sibs = append(sibs, s)
	}
	for _, p := range h.siblings {
		sibs = append(sibs, sibling{RFilename: p})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id":       r.PathValue("org") + "/" + r.PathValue("name"),
		"sha":      testSHA,
		"siblings": sibs,
	})
}

func (h *fakeHub) resolve(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(w, r) {
		return
	}
	if r.PathValue("rev") != testSHA {
		h.t.Errorf("resolve with revision %q, want the commit sha", r.PathValue("rev"))
	}
	p := r.PathValue("path")
	data, ok := h.files[p]
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	if h.lfs[p] {
		etag := sha256Hex(data)
		if e, ok := h.badETag[p]; ok {
			etag = e
		}
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(data)))
		w.Header().Set("X-Linked-Etag", `"`+etag+`"`)
		w.Header().Set("ETag", `"`+etag+`"`)
		http.Redirect(w, r, h.cdnSrv.URL+"/cdn/"+p+"?X-Amz-Signature=abc", http.StatusFound)
		return
	}
	h.serve(w, r, p)
}

// cdn serves GET /cdn/{path...}.
func (h *fakeHub) cdn(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.cdnAuth = append(h.cdnAuth, r.Header.Get("Authorization"))
	h.mu.Unlock()
	p, ok := strings.CutPrefix(r.URL.Path, "/cdn/")
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	h.serve(w, r, p)
}

// serve counts a content request and serves the file, honouring Range.
func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request, p string) {
	h.mu.Lock()
	h.gets[p]++
	n := h.gets[p]
	h.ranges[p] = append(h.ranges[p], r.Header.Get("Range"))
	h.mu.Unlock()
	if h.hook != nil && h.hook(w, r, p, n) {
		return
	}
	data := h.files[p]
	if !h.lfs[p] {
		// A git blob id, which is not a sha256 and must not be checked.
		w.Header().Set("ETag", `"`+sha256Hex(data)[:40]+`"`)
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

func (h *fakeHub) counts() (api int, gets map[string]int, ranges map[string][]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	gets = map[string]int{}
	for k, v := range h.gets {
		gets[k] = v
	}
	ranges = map[string][]string{}
	for k, v := range h.ranges {
		ranges[k] = slices.Clone(v)
	}
	return h.apiCalls, gets, ranges
}

func (h *fakeHub) client(t *testing.T) *Client {
	return &Client{
		BaseURL:  h.srv.URL,
		HTTP:     h.srv.Client(),
		CacheDir: t.TempDir(),
		Logger:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		backoff:  time.Millisecond,
	}
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// standardRepo adds a typical model repository to h.
func standardRepo(h *fakeHub) {
	h.add("config.json", []byte(`{"model_type":"llama"}`), false)
	h.add("model-00001-of-00002.safetensors", randomBytes(3<<20+123, 1), true)
	h.add("model-00002-of-00002.safetensors", randomBytes(1<<20, 2), true)
	h.add("model.safetensors.index.json", []byte(`{"weight_map":{}}`), false)
	h.add("tokenizer.json", []byte(`{"version":"1.0"}`), false)
	h.add("tokenizer.model", randomBytes(5000, 3), true)
	h.add("vocab.txt", []byte("a\nb\n"), false)
	h.add("README.md", []byte("# model\n"), false)
	h.add(".gitattributes", []byte("*.safetensors filter=lfs\n"), false)
	h.add("onnx/model.onnx", randomBytes(100, 4), true)
	h.add("sub/dir/extra.json", []byte(`{}`), false)
}

// checkDir verifies that dir holds exactly the wanted files of h, with the
// right contents, and nothing else (no .partial leftovers).
func checkDir(t *testing.T, h *fakeHub, dir string, want func(string) bool) {
	t.Helper()
	var got []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got = append(got, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wantFiles []string
	for _, p := range h.order {
		if want(p) {
			wantFiles = append(wantFiles, p)
		}
	}
	slices.Sort(got)
	slices.Sort(wantFiles)
	if !slices.Equal(got, wantFiles) {
		t.Fatalf("files in %s:\n got %q\nwant %q", dir, got, wantFiles)
	}
	for _, p := range wantFiles {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, h.files[p]) {
			t.Errorf("%s: content differs (%d bytes, want %d)", p, len(data), len(h.files[p]))
		}
	}
}

func TestPullFull(t *testing.T) {
	h := newFakeHub(t)
	standardRepo(h)
	h.token = "hf_secret"
	c := h.client(t)
	c.Token = "hf_secret"
	var mu sync.Mutex
	final := map[string][2]int64{}
	calls := 0
	c.Progress = func(file string, done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		final[file] = [2]int64{done, total}
	}

	dir, err := c.Pull(t.Context(), "org/model", "", nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if want := filepath.Join(c.CacheDir, "org--model", testSHA); dir != want {
		t.Errorf("dir = %s, want %s", dir, want)
	}
	checkDir(t, h, dir, DefaultInclude)

	api, gets, _ := h.counts()
	if api != 1 {
		t.Errorf("API called %d times", api)
	}
	for _, p := range h.order {
		want := 0
		if DefaultInclude(p) {
			want = 1
		}
		if gets[p] != want {
			t.Errorf("%s requested %d times, want %d", p, gets[p], want)
		}
	}
	for _, a := range h.auth {
		if a != "Bearer hf_secret" {
			t.Errorf("request to the Hub with Authorization %q", a)
		}
	}
	if len(h.cdnAuth) == 0 {
		t.Error("no request reached the CDN")
	}
	for _, a := range h.cdnAuth {
		if a != "" {
			t.Errorf("the token was sent to the CDN: Authorization %q", a)
		}
	}
	for _, p := range h.order {
		if !DefaultInclude(p) {
			continue
		}
		n := int64(len(h.files[p]))
		if got := final[p]; got != [2]int64{n, n} {
			t.Errorf("last progress of %s = %v, want [%d %d]", p, got, n, n)
		}
	}
	if calls < 2*len(final) {
		t.Errorf("only %d progress calls for %d files", calls, len(final))
	}
}

func TestDefaultCacheDirAndEnvToken(t *testing.T) {
	h := newFakeHub(t)
	h.add("config.json", []byte(`{}`), false)
	h.token = "from_env"
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HF_TOKEN", "from_env")
	c := h.client(t)
	c.CacheDir = ""
	dir, err := c.Pull(t.Context(), "org/model", "main", nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if want := filepath.Join(cache, "batchd", "models", "org--model", testSHA); dir != want {
		t.Errorf("dir = %s, want %s", dir, want)
	}
}

// The connection drops mid-file; the retry resumes with a Range request for
// exactly the bytes that arrived.
func TestPullResumeAfterDrop(t *testing.T) {
	h := newFakeHub(t)
	standardRepo(h)
	const name = "model-00001-of-00002.safetensors"
	const cut = 1<<20 + 777
	h.hook = func(w http.ResponseWriter, r *http.Request, p string, n int) bool {
		if p != name || n != 1 {
			return false
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return true
		}
		defer conn.Close()
		data := h.files[p]
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/octet-stream\r\n\r\n", len(data))
		buf.Write(data[:cut])
		buf.Flush()
		return true
	}
	c := h.client(t)
	dir, err := c.Pull(t.Context(), "org/model", "main", nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	checkDir(t, h, dir, DefaultInclude)
	_, gets, ranges := h.counts()
	if gets[name] != 2 {
		t.Errorf("%s requested %d times, want 2", name, gets[name])
	}
	if want := []string{"", fmt.Sprintf("bytes=%d-", cut)}; !slices.Equal(ranges[name], want) {
		t.Errorf("Range headers = %q, want %q", ranges[name], want)
	}
}

// A partial file left by an interrupted pull is resumed by the next pull;
// a server that ignores Range gets the whole file written afresh.
func TestPullResumesEarlierPartial(t *testing.T) {
	for _, honourRange := range []bool{true, false} {
		t.Run(fmt.Sprintf("range=%v", honourRange), func(t *testing.T) {
			h := newFakeHub(t)
			const name = "model.safetensors"
			h.add(name, randomBytes(200_000, 9), true)
			h.add("config.json", []byte(`{}`), false)
			if !honourRange {
				h.hook = func(w http.ResponseWriter, r *http.Request, p string, n int) bool {
					w.Header().Set("Content-Length", fmt.Sprint(len(h.files[p])))
					w.Write(h.files[p])
					return true
				}
			}
			c := h.client(t)
			dir := filepath.Join(c.CacheDir, "org--model", testSHA)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			const have = 70_001
			partial := append([]byte(nil), h.files[name][:have]...)
			if !honourRange {
				// Garbage that must not survive a server ignoring Range.
				for i := range partial {
					partial[i] ^= 0xff
				}
			}
			if err := os.WriteFile(filepath.Join(dir, name+partialSuffix), partial, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Pull(t.Context(), "org/model", "main", nil); err != nil {
				t.Fatalf("Pull: %v", err)
			}
			checkDir(t, h, dir, DefaultInclude)
			_, _, ranges := h.counts()
			if want := []string{fmt.Sprintf("bytes=%d-", have)}; !slices.Equal(ranges[name], want) {
				t.Errorf("Range headers = %q, want %q", ranges[name], want)
			}
		})
	}
}

func TestPullSHA256Mismatch(t *testing.T) {
	h := newFakeHub(t)
	standardRepo(h)
	const name = "model-00002-of-00002.safetensors"
	h.badETag[name] = strings.Repeat("ab", 32)
	c := h.client(t)
	_, err := c.Pull(t.Context(), "org/model", "main", nil)
	if err == nil {
		t.Fatal("Pull succeeded despite a sha256 mismatch")
	}
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "sha256") || !strings.Contains(err.Error(), name) {
		t.Errorf("error = %v, want a sha256 mismatch for %s", err, name)
	}
	dir := filepath.Join(c.CacheDir, "org--model", testSHA)
	for _, p := range []string{name, name + partialSuffix} {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after the mismatch (stat err %v)", p, err)
		}
	}
	_, gets, _ := h.counts()
	if gets[name] != 1 {
		t.Errorf("%s requested %d times: a checksum mismatch must not be retried", name, gets[name])
	}
}

// The listing's own size and sha256 (?blobs=true) are checked too.
func TestPullVerifiesListingChecksums(t *testing.T) {
	h := newFakeHub(t)
	h.add("model.safetensors", randomBytes(4096, 5), true)
	h.blobs = true
	// The server's headers are self-consistent but disagree with the
	// listing, which wins.
	h.hook = func(w http.ResponseWriter, r *http.Request, p string, n int) bool {
		w.Header().Set("Content-Length", "4096")
		w.Write(randomBytes(4096, 6))
		return true
	}
	c := h.client(t)
	_, err := c.Pull(t.Context(), "org/model", "main", nil)
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("error = %v, want ErrChecksum", err)
	}
}

func TestPullHTTPErrors(t *testing.T) {
	t.Setenv("HF_TOKEN", "")
	tests := []struct {
		name  string
		setup func(h *fakeHub, c *Client)
		is    error
		msg   string
	}{
		{"repo 404", func(h *fakeHub, c *Client) { h.apiStatus = http.StatusNotFound }, ErrNotFound, "no such repo or revision"},
		{"repo 401", func(h *fakeHub, c *Client) { h.token = "needed" }, ErrUnauthorized, "gated or private: set HF_TOKEN"},
		{"repo 403 with token", func(h *fakeHub, c *Client) { h.apiStatus = http.StatusForbidden; c.Token = "weak" },
			ErrUnauthorized, "gated or private: set HF_TOKEN"},
		{"file 403", func(h *fakeHub, c *Client) {
			h.hook = func(w http.ResponseWriter, r *http.Request, p string, n int) bool {
				http.Error(w, "gated", http.StatusForbidden)
				return true
			}
		}, ErrUnauthorized, "gated or private: set HF_TOKEN"},
		{"file 404", func(h *fakeHub, c *Client) { h.siblings = []string{"missing.json"} }, ErrNotFound, "missing.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newFakeHub(t)
			h.add("config.json", []byte(`{}`), false)
			c := h.client(t)
			tt.setup(h, c)
			_, err := c.Pull(t.Context(), "org/model", "main", nil)
			if err == nil {
				t.Fatal("Pull succeeded")
			}
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error = %q, want %v containing %q", err, tt.is, tt.msg)
			}
			if !strings.Contains(err.Error(), "org/model@main") {
				t.Errorf("error %q does not name the repository", err)
			}
			// Permanent errors are not retried.
			api, gets, _ := h.counts()
			if api != 1 || gets["config.json"] > 1 {
				t.Errorf("%d API calls, %d config.json requests: permanent errors were retried", api, gets["config.json"])
			}
		})
	}
}

func TestPullRejectsTraversal(t *testing.T) {
	for _, bad := range []string{"../evil.json", "a/../../evil.json", "/etc/evil.json", `..\evil.json`, "a//b.json", "./x.json", "x.json.partial"} {
		t.Run(bad, func(t *testing.T) {
			h := newFakeHub(t)
			h.add("config.json", []byte(`{}`), false)
			h.siblings = []string{bad}
			root := t.TempDir()
			c := h.client(t)
			c.CacheDir = filepath.Join(root, "cache")
			_, err := c.Pull(t.Context(), "org/model", "main", func(string) bool { return true })
			if err == nil {
				t.Fatal("Pull accepted the listing")
			}
			if !strings.Contains(err.Error(), "file name") {
				t.Errorf("error = %v", err)
			}
			_, gets, _ := h.counts()
			if len(gets) != 0 {
				t.Errorf("files were requested: %v", gets)
			}
			if _, err := os.Stat(filepath.Join(root, "evil.json")); err == nil {
				t.Error("evil.json written outside the cache")
			}
		})
	}
}

func TestPullIncludeFilter(t *testing.T) {
	h := newFakeHub(t)
	standardRepo(h)
	c := h.client(t)
	only := func(p string) bool { return p == "config.json" || strings.HasPrefix(p, "onnx/") }
	dir, err := c.Pull(t.Context(), "org/model", "main", only)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	checkDir(t, h, dir, only)
	_, gets, _ := h.counts()
	if len(gets) != 2 {
		t.Errorf("requests: %v, want config.json and onnx/model.onnx only", gets)
	}

	if _, err := c.Pull(t.Context(), "org/model", "main", func(string) bool { return false }); err == nil ||
		!strings.Contains(err.Error(), "none of the") {
		t.Errorf("empty selection: err = %v", err)
	}
}

func TestPullSkipsCompleteFiles(t *testing.T) {
	h := newFakeHub(t)
	standardRepo(h)
	h.blobs = true
	c := h.client(t)
	dir, err := c.Pull(t.Context(), "org/model", "main", nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	_, first, _ := h.counts()

	dir2, err := c.Pull(t.Context(), "org/model", "main", nil)
	if err != nil {
		t.Fatalf("second Pull: %v", err)
	}
	if dir2 != dir {
		t.Errorf("second Pull returned %s, first %s", dir2, dir)
	}
	api, second, _ := h.counts()
	if api != 2 {
		t.Errorf("API calls = %d, want 2", api)
	}
	if !maps.Equal(first, second) {
		t.Errorf("second pull downloaded again: before %v, after %v", first, second)
	}

	// A file of the wrong size (per the listing) is fetched again.
	const name = "tokenizer.json"
	if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pull(t.Context(), "org/model", "main", nil); err != nil {
		t.Fatalf("third Pull: %v", err)
	}
	checkDir(t, h, dir, DefaultInclude)
	_, third, _ := h.counts()
	if third[name] != first[name]+1 {
		t.Errorf("%s requested %d times, want %d", name, third[name], first[name]+1)
	}
}

func TestPullRetriesTransientErrors(t *testing.T) {
	h := newFakeHub(t)
	standardRepo(h)
	h.hook = func(w http.ResponseWriter, r *http.Request, p string, n int) bool {
		if p == "config.json" && n <= 2 {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	c := h.client(t)
	dir, err := c.Pull(t.Context(), "org/model", "main", nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	checkDir(t, h, dir, DefaultInclude)
	_, gets, _ := h.counts()
	if gets["config.json"] != 3 {
		t.Errorf("config.json requested %d times, want 3", gets["config.json"])
	}

	// A server that keeps failing is given up on.
	h2 := newFakeHub(t)
	h2.add("config.json", []byte(`{}`), false)
	h2.hook = func(w http.ResponseWriter, r *http.Request, p string, n int) bool {
		http.Error(w, "broken", http.StatusInternalServerError)
		return true
	}
	c2 := h2.client(t)
	c2.retries = 3
	_, err = c2.Pull(t.Context(), "org/model", "main", nil)
	if err == nil || !strings.Contains(err.Error(), "giving up after 3 attempts") || !strings.Contains(err.Error(), "500") {
		t.Errorf("err = %v", err)
	}
	if _, gets, _ := h2.counts(); gets["config.json"] != 3 {
		t.Errorf("config.json requested %d times, want 3", gets["config.json"])
	}
}

// A server that stops sending mid-file is abandoned after the stall timeout
// and the download resumes.
func TestPullStalledDownload(t *testing.T) {
	h := newFakeHub(t)
	const name = "model.safetensors"
	h.add(name, randomBytes(100_000, 7), true)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h.hook = func(w http.ResponseWriter, r *http.Request, p string, n int) bool {
		if n != 1 {
			return false
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(h.files[p])))
		w.Write(h.files[p][:1000])
		http.NewResponseController(w).Flush()
		select { // hang until the client gives up (or the test ends)
		case <-r.Context().Done():
		case <-release:
		}
		return true
	}
	c := h.client(t)
	c.stallTimeout = 250 * time.Millisecond
	dir, err := c.Pull(t.Context(), "org/model", "main", nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	checkDir(t, h, dir, DefaultInclude)
	_, _, ranges := h.counts()
	if want := []string{"", "bytes=1000-"}; !slices.Equal(ranges[name], want) {
		t.Errorf("Range headers = %q, want %q", ranges[name], want)
	}
}

func TestPullCancelled(t *testing.T) {
	h := newFakeHub(t)
	h.add("model.safetensors", randomBytes(10_000, 8), true)
	ctx, cancel := context.WithCancel(t.Context())
	h.hook = func(w http.ResponseWriter, r *http.Request, p string, n int) bool {
		w.Header().Set("Content-Length", "10000")
		w.Write(h.files[p][:10])
		http.NewResponseController(w).Flush()
		cancel()
		<-r.Context().Done()
		return true
	}
	c := h.client(t)
	_, err := c.Pull(ctx, "org/model", "main", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, gets, _ := h.counts(); gets["model.safetensors"] != 1 {
		t.Errorf("cancelled download was retried")
	}
}

func TestPullBadRepo(t *testing.T) {
	c := &Client{BaseURL: "http://127.0.0.1:1", CacheDir: t.TempDir()}
	for _, repo := range []string{"", "model", "org/", "/model", "a/b/c", "../x", "org/..", "org/mo del"} {
		if _, err := c.Pull(t.Context(), repo, "main", nil); err == nil || !strings.Contains(err.Error(), "ORG/NAME") {
			t.Errorf("Pull(%q): err = %v", repo, err)
		}
	}
}

func TestParseContentRange(t *testing.T) {
	for _, tt := range []struct {
		in           string
		start, total int64
		ok           bool
	}{
		{"bytes 100-199/200", 100, 200, true},
		{"bytes 0-0/*", 0, -1, true},
		{"bytes 100-199/150", 0, 0, false},
		{"bytes 200-100/300", 0, 0, false},
		{"bytes */200", 0, 0, false},
		{"items 1-2/3", 0, 0, false},
		{"", 0, 0, false},
	} {
		start, total, ok := parseContentRange(tt.in)
		if ok != tt.ok || ok && (start != tt.start || total != tt.total) {
			t.Errorf("parseContentRange(%q) = %d, %d, %v", tt.in, start, total, ok)
		}
	}
}

func TestDefaultInclude(t *testing.T) {
	for p, want := range map[string]bool{
		"config.json": true, "model-00001-of-00003.safetensors": true, "tokenizer.model": true,
		"merges.txt": true, "sub/tokenizer.model": true, "README.md": false, "pytorch_model.bin": false,
		".gitattributes": false, "model.gguf": false, "spm.model": false,
	} {
		if got := DefaultInclude(p); got != want {
			t.Errorf("DefaultInclude(%q) = %v", p, got)
		}
	}
}
