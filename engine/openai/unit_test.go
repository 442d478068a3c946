package openai

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	low := func(int64) int64 { return 0 }
	high := func(n int64) int64 { return n - 1 }
	withHeader := func(status int, v string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {v}}}
	}
	const ms = time.Millisecond
	for _, tc := range []struct {
		name     string
		min, max time.Duration
		attempt  int
		resp     *http.Response
		rnd      func(int64) int64
		want     time.Duration
	}{
		{"first, low jitter", 100 * ms, time.Second, 0, nil, low, 50 * ms},
		{"first, high jitter", 100 * ms, time.Second, 0, nil, high, 100 * ms},
		{"doubles", 100 * ms, time.Second, 3, nil, high, 800 * ms},
		{"doubles, low jitter", 100 * ms, time.Second, 3, nil, low, 400 * ms},
		{"capped", 100 * ms, time.Second, 10, nil, high, time.Second},
		{"capped, low jitter", 100 * ms, time.Second, 60, nil, low, 500 * ms},
		{"zero min", 0, time.Second, 3, nil, high, 0},
		{"500 without header", 100 * ms, time.Second, 0, &http.Response{StatusCode: 500, Header: http.Header{}}, low, 50 * ms},
		{"retry-after seconds", 100 * ms, 30 * time.Second, 0, withHeader(429, "2"), low, 2 * time.Second},
		{"retry-after 3600 clamped", 500 * ms, 30 * time.Second, 0, withHeader(429, "3600"), low, 30 * time.Second},
		{"retry-after huge clamped", 500 * ms, 30 * time.Second, 0, withHeader(503, "99999999999999999"), low, 30 * time.Second},
		{"retry-after zero", 100 * ms, time.Second, 2, withHeader(429, "0"), high, 0},
		{"retry-after date", 100 * ms, 30 * time.Second, 0, withHeader(503, now.Add(5*time.Second).Format(http.TimeFormat)), low, 5 * time.Second},
		{"retry-after date clamped", 100 * ms, 30 * time.Second, 0, withHeader(503, now.Add(time.Hour).Format(http.TimeFormat)), low, 30 * time.Second},
		{"retry-after past date", 100 * ms, 30 * time.Second, 0, withHeader(503, now.Add(-time.Hour).Format(http.TimeFormat)), high, 0},
		{"retry-after garbage", 100 * ms, time.Second, 1, withHeader(429, "soon"), high, 200 * ms},
		{"retry-after negative", 100 * ms, time.Second, 1, withHeader(429, "-5"), high, 200 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := backoff(tc.min, tc.max, tc.attempt, tc.resp, now, tc.rnd); got != tc.want {
				t.Errorf("backoff = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestBackoffBounds(t *testing.T) {
	minWait, maxWait := 500*time.Millisecond, 30*time.Second
	for attempt := range 40 {
		step := minWait << min(attempt, 20)
		step = min(step, maxWait)
		for range 50 {
			got := backoff(minWait, maxWait, attempt, nil, time.Now(), rand.Int64N)
			if got < step/2 || got > step {
				t.Fatalf("attempt %d: backoff %s outside [%s, %s]", attempt, got, step/2, step)
			}
		}
	}
}

func TestReplaceModel(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"replace", `{"model":"a","x":1}`, `{"model":"m","x":1}`},
		{"keeps spacing", "{ \"x\" : 1.50 ,\n \"model\" :\t\"a\" }", "{ \"x\" : 1.50 ,\n \"model\" :\t\"m\" }"},
		{"non-string model", `{"model":{"n":1},"x":[1,2]}`, `{"model":"m","x":[1,2]}`},
		{"nested untouched", `{"messages":[{"model":"inner"}]}`, `{"model":"m","messages":[{"model":"inner"}]}`},
		{"added to empty", `{}`, `{"model":"m"}`},
		{"added to empty with space", ` { } `, ` {"model":"m" } `},
		{"duplicates", `{"model":"a","model":"b"}`, `{"model":"m","model":"m"}`},
		{"escaped key", `{"mod\u0065l":"a"}`, `{"mod\u0065l":"m"}`},
		{"other case kept", `{"Model":"a"}`, `{"model":"m","Model":"a"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := replaceModel([]byte(tc.in), "m")
			if err != nil {
				t.Fatalf("replaceModel(%s): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Errorf("replaceModel(%s) =\n %s\nwant\n %s", tc.in, got, tc.want)
			}
		})
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{"model":}`, `{"a":1} {}`, `{"a":1`} {
		if got, err := replaceModel([]byte(bad), "m"); err == nil {
			t.Errorf("replaceModel(%q) = %s, want an error", bad, got)
		}
	}
}

func FuzzReplaceModel(f *testing.F) {
	for _, s := range []string{`{}`, `{"model":"a"}`, `{"a":[1,{"model":2}],"model":null}`, `{"x":"\u00e9"}`, ` {"b":true} `} {
		f.Add(s, "name")
	}
	f.Fuzz(func(t *testing.T, body, model string) {
		var before map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &before) != nil || before == nil {
			return
		}
		for k := range before {
			if strings.EqualFold(k, "model") && k != "model" {
				return // encoding/json matches keys without case; servers do not
			}
		}
		got, err := replaceModel([]byte(body), model)
		if err != nil {
			t.Fatalf("replaceModel(%q): %v", body, err)
		}
		var after map[string]json.RawMessage
		if err := json.Unmarshal(got, &after); err != nil {
			t.Fatalf("replaceModel(%q) = %q, not JSON: %v", body, got, err)
		}
		var m, want string
		enc, _ := json.Marshal(model) // replaces invalid UTF-8 as replaceModel does
		_ = json.Unmarshal(enc, &want)
		if err := json.Unmarshal(after["model"], &m); err != nil || m != want {
			t.Fatalf("model = %s, want %q", after["model"], model)
		}
		delete(before, "model")
		delete(after, "model")
		if len(before) != len(after) {
			t.Fatalf("members changed: %v → %v", before, after)
		}
		for k, v := range before {
			if string(after[k]) != string(v) {
				t.Fatalf("member %q changed: %s → %s", k, v, after[k])
			}
		}
	})
}

func TestErrorBody(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		in     string
		want   string
	}{
		{"kept", 400, `{"error":{"message":"x"}}`, `{"error":{"message":"x"}}`},
		{"empty", 404, ``, `{"error":{"message":"404 Not Found","type":"invalid_request_error","param":null,"code":null}}`},
		{"html", 413, `<h1>too big</h1>`, `{"error":{"message":"\u003ch1\u003etoo big\u003c/h1\u003e","type":"invalid_request_error","param":null,"code":null}}`},
		{"array", 400, `[1]`, `{"error":{"message":"[1]","type":"invalid_request_error","param":null,"code":null}}`},
		{"null error", 400, `{"error":null}`, `{"error":{"message":"{\"error\":null}","type":"invalid_request_error","param":null,"code":null}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(errorBody(tc.status, []byte(tc.in)))
			if got != tc.want {
				t.Errorf("errorBody(%q) =\n %s\nwant\n %s", tc.in, got, tc.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("errorBody(%q) is not JSON", tc.in)
			}
		})
	}
}

func TestSnippet(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"  short  ", "short"},
		{strings.Repeat("é", 200), strings.Repeat("é", 128) + "…"},
		{"\xff" + strings.Repeat("a", 300), "\uFFFD" + strings.Repeat("a", 253) + "…"},
		{strings.Repeat("a", 256) + strings.Repeat(" ", 1000), strings.Repeat("a", 256)},
	} {
		if got := snippet([]byte(tc.body)); got != tc.want {
			t.Errorf("snippet(%.20q…) = %q, want %q", tc.body, got, tc.want)
		}
	}
}
