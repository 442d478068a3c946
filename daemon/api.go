package daemon

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/batchd/batchd/wire"
)

// The OpenAI-compatible API (Files, Batches, online endpoints) lives in
// api_*.go; this file has what they share: auth, errors, lists.

// writeAPIError answers with OpenAI's error shape.
func writeAPIError(w http.ResponseWriter, status int, code, param, format string, args ...any) {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	typ := wire.TypeInvalidRequest
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_exceeded"
	case status >= 500:
		typ = wire.TypeServerError
	}
	writeJSON(w, status, wire.NewError(typ, msg, param, code))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}

// access guards the HTTP routes with the API keys. With no keys it lets
// everything through (Validate allows that only on loopback or with
// api.open). With keys, the API (/v1/) takes Authorization: Bearer KEY
// or x-api-key: KEY (Anthropic's clients) only; the status page and /metrics take that header or the status-page
// cookie, which GET /?key=KEY sets for a browser. Keys and cookies are
// compared in constant time through their SHA-256, and never logged.
// A reload (SIGHUP) swaps the keys under running handlers (set).
type access struct{ cur atomic.Pointer[accessKeys] }

type accessKeys struct {
	keys    [][sha256.Size]byte // SHA-256 of each key
	cookies [][sha256.Size]byte // SHA-256 of each key's cookie value
}

// statusCookie is the status page's cookie. Its value is derived from a
// key (statusCookieValue), so the cookie alone opens no /v1/ route, and it
// stops working when its key leaves api.keys.
const statusCookie = "batchd_status"

func newAccess(keys []string) *access {
	a := &access{}
	a.set(keys)
	return a
}

// set makes keys the accepted keys from the next request on.
func (a *access) set(keys []string) {
	k := &accessKeys{}
	for _, key := range keys {
		k.keys = append(k.keys, sha256.Sum256([]byte(key)))
		k.cookies = append(k.cookies, sha256.Sum256([]byte(statusCookieValue(key))))
	}
	a.cur.Store(k)
}

func statusCookieValue(key string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("batchd status page"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// match tells whether v is one of want (as SHA-256), in constant time.
func match(want [][sha256.Size]byte, v string) bool {
	h := sha256.Sum256([]byte(v))
	ok := 0
	for _, w := range want {
		ok |= subtle.ConstantTimeCompare(h[:], w[:])
	}
	return ok == 1
}

// bearer returns the token of r's Authorization: Bearer header.
func bearer(r *http.Request) (string, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return tok, ok && tok != ""
}

// api wraps the /v1/ routes: a Bearer key or 401 in OpenAI's shape. The
// cookie is not accepted here, so that no other site can drive the API
// through a browser that has it.
func (a *access) api(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := a.cur.Load()
		if len(k.keys) == 0 {
			h.ServeHTTP(w, r)
			return
		}
		tok, ok := bearer(r)
		if !ok {
			// Anthropic's clients send the key as x-api-key.
			tok = r.Header.Get("X-Api-Key")
			ok = tok != ""
		}
		if !ok {
			writeAPIError(w, http.StatusUnauthorized, "missing_api_key", "",
				"You didn't provide an API key. Provide it in the Authorization header as Bearer KEY (or as x-api-key: KEY).")
			return
		}
		if !match(k.keys, tok) {
			writeAPIError(w, http.StatusUnauthorized, "invalid_api_key", "", "Incorrect API key provided.")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// page wraps the status page and /metrics: a Bearer key or the status
// cookie. GET /?key=KEY with a valid key sets the cookie (HttpOnly,
// SameSite=Strict, Secure over HTTPS, for the browser session) and
// redirects to the page without the key in its address.
func (a *access) page(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := a.cur.Load()
		if len(k.keys) == 0 {
			h.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/" && r.URL.Query().Has("key") {
			key := r.URL.Query().Get("key")
			if !match(k.keys, key) {
				a.refuse(w, "Incorrect API key provided.")
				return
			}
			http.SetCookie(w, &http.Cookie{Name: statusCookie, Value: statusCookieValue(key), Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode,
				Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"})
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Referrer-Policy", "no-referrer")
			// Relative (http.Redirect would make it /), so that a
			// reverse proxy's path prefix is kept.
			w.Header().Set("Location", "./")
			w.WriteHeader(http.StatusSeeOther)
			return
		}
		if tok, ok := bearer(r); ok {
			if !match(k.keys, tok) {
				a.refuse(w, "Incorrect API key provided.")
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(statusCookie); err == nil && match(k.cookies, c.Value) {
			h.ServeHTTP(w, r)
			return
		}
		a.refuse(w, "This batchd needs an API key.")
	})
}

func (a *access) refuse(w http.ResponseWriter, why string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="batchd"`)
	http.Error(w, why+" Send Authorization: Bearer KEY, or open /?key=KEY once in a browser (it sets a cookie for the session).",
		http.StatusUnauthorized)
}

// listPage is OpenAI's cursor list: objects newest first, `after` the id
// of the last object of the previous page.
type listPage[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// paginate cuts items (already ordered) after the item whose id is after,
// to at most limit. It reports false when after names no item.
func paginate[T any](items []T, id func(T) string, after string, limit int) (listPage[T], bool) {
	start := 0
	if after != "" {
		found := false
		for i, it := range items {
			if id(it) == after {
				start, found = i+1, true
				break
			}
		}
		if !found {
			return listPage[T]{}, false
		}
	}
	rest := items[start:]
	page := listPage[T]{Object: "list", Data: rest[:min(limit, len(rest))], HasMore: len(rest) > limit}
	if page.Data == nil {
		page.Data = []T{}
	}
	if n := len(page.Data); n > 0 {
		f, l := id(page.Data[0]), id(page.Data[n-1])
		page.FirstID, page.LastID = &f, &l
	}
	return page, true
}

// limitParam reads ?limit= (default def, 1..max).
func limitParam(w http.ResponseWriter, r *http.Request, def, max int) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "limit", "limit must be an integer between 1 and %d, got %q", max, v)
		return 0, false
	}
	return n, true
}

func randomID(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// validID tells whether id is safe to use as a file name: letters, digits,
// '-' and '_' only.
func validID(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || rest == "" || len(rest) > 80 {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

var errNotFound = errors.New("not found")

// logAPI logs a server-side failure of an API call (never its headers).
func logAPI(log *slog.Logger, r *http.Request, err error) {
	log.Error("api request failed", "method", r.Method, "path", r.URL.Path, "error", err)
}

// readRecord decodes the JSON file at path (an API record: a file object,
// an API batch) into v; errNotFound when there is no such file.
func readRecord(path string, v any) error {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
