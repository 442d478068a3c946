package daemon_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// get sends GET path to e's daemon, with the API key when withKey, and
// returns the status, the Content-Type and the body.
func (e *apiEnv) get(path string, withKey bool) (int, string, string) {
	e.t.Helper()
	auth := ""
	if withKey {
		auth = "Bearer " + e.key
	}
	return getWith(e.t, http.DefaultClient, e.base+path, auth)
}

func getWith(t *testing.T, c *http.Client, url, auth string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// With api.keys, every route but /healthz and /readyz needs a key: the API,
// the status page and its data, and the metrics.
func TestKeysGuardEveryRoute(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.API.Keys = append(c.API.Keys, "sk-second-key")
	})
	guarded := []string{"/", "/status.json", "/metrics", "/app.js", "/style.css", "/v1/models", "/v1/batches", "/nope"}
	for _, path := range guarded {
		for _, auth := range []string{"", "Bearer", "Bearer wrong", "Basic " + e.key, "Bearer " + e.key + "x"} {
			if st, _, body := getWith(t, http.DefaultClient, e.base+path, auth); st != http.StatusUnauthorized {
				t.Errorf("GET %s with %q: %d, want 401\n%s", path, auth, st, body)
			}
		}
		for _, key := range []string{e.key, "sk-second-key"} {
			st, _, body := getWith(t, http.DefaultClient, e.base+path, "Bearer "+key)
			want := http.StatusOK
			if path == "/nope" {
				want = http.StatusNotFound
			}
			if st != want {
				t.Errorf("GET %s with a key: %d, want %d\n%s", path, st, want, body)
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if st, _, _ := e.get(path, false); st != http.StatusOK {
			t.Errorf("GET %s without a key: %d, want 200", path, st)
		}
	}
	// The status page's 401 says how a browser gets in.
	if _, _, body := e.get("/", false); !strings.Contains(body, "/?key=") {
		t.Errorf("the status page's 401 does not say how to get in: %s", body)
	}
	// The /v1/ 401 keeps OpenAI's error shape.
	if _, ct, body := e.get("/v1/models", false); !strings.HasPrefix(ct, "application/json") || !strings.Contains(body, "missing_api_key") {
		t.Errorf("/v1/models without a key: %s %s", ct, body)
	}
	if strings.Contains(e.logs.String(), e.key) {
		t.Error("the daemon logged an API key")
	}
}

// A browser opens /?key=KEY once: the daemon sets an HttpOnly cookie, sends
// it on to the page without the key in the address, and the cookie then
// opens the page, its data and the metrics, but not the API.
func TestStatusPageKeyCookie(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{Jar: jar}

	if st, _, _ := getWith(t, browser, e.base+"/?key=wrong", ""); st != http.StatusUnauthorized {
		t.Fatalf("/?key=wrong: %d, want 401", st)
	}
	if st, _, _ := getWith(t, browser, e.base+"/status.json", ""); st != http.StatusUnauthorized {
		t.Fatalf("a wrong key set a cookie: /status.json %d", st)
	}

	// The answer to /?key=KEY, unfollowed.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(e.base + "/?key=" + e.key)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "./" {
		t.Fatalf("/?key=KEY: %s, Location %q; want 303 to ./", resp.Status, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "batchd_status" {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatalf("no batchd_status cookie: %v", resp.Header["Set-Cookie"])
	}
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" || cookie.Secure {
		t.Errorf("cookie %s: want HttpOnly, SameSite=Strict, Path=/, not Secure over plain HTTP", cookie)
	}
	if strings.Contains(cookie.Value, e.key) {
		t.Errorf("the cookie carries the key itself: %s", cookie)
	}

	// Followed, as a browser does.
	resp, err = browser.Get(e.base + "/?key=" + e.key)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "<html") || resp.Request.URL.RawQuery != "" {
		t.Fatalf("after /?key=KEY: %s at %s", resp.Status, resp.Request.URL)
	}
	for _, path := range []string{"/status.json", "/metrics", "/app.js"} {
		if st, _, body := getWith(t, browser, e.base+path, ""); st != http.StatusOK {
			t.Errorf("%s with the cookie: %d\n%s", path, st, body)
		}
	}
	if st, _, _ := getWith(t, browser, e.base+"/v1/models", ""); st != http.StatusUnauthorized {
		t.Errorf("/v1/models with only the cookie: %d, want 401", st)
	}
	// A forged cookie opens nothing.
	forged := &http.Client{}
	req, _ := http.NewRequest("GET", e.base+"/status.json", nil)
	req.AddCookie(&http.Cookie{Name: "batchd_status", Value: e.key})
	if resp, err := forged.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a cookie holding the raw key: %v %v, want 401", resp.Status, err)
	} else {
		resp.Body.Close()
	}
	if strings.Contains(e.logs.String(), e.key) {
		t.Error("the daemon logged an API key")
	}
}

// api.metrics_public opens /metrics alone.
func TestMetricsPublic(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) { c.API.MetricsPublic = true })
	if st, _, body := e.get("/metrics", false); st != http.StatusOK || !strings.Contains(body, "batchd_") {
		t.Errorf("/metrics without a key: %d\n%s", st, body)
	}
	for _, path := range []string{"/", "/status.json", "/v1/models"} {
		if st, _, _ := e.get(path, false); st != http.StatusUnauthorized {
			t.Errorf("%s without a key: %d, want 401", path, st)
		}
	}
}

// Without keys, on loopback, everything stays open as before.
func TestNoKeysOnLoopbackIsOpen(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) { c.API.Keys = nil })
	for _, path := range []string{"/", "/status.json", "/metrics", "/v1/models"} {
		if st, _, _ := e.get(path, false); st != http.StatusOK {
			t.Errorf("%s without keys: %d, want 200", path, st)
		}
	}
}
