package openaitest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/echo"
)

const deadline = 30 * time.Second

// client opens a connection per request, so a request after Stop or
// Restart never lands on a connection the server already closed.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s := NewServer(opts)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func post(t *testing.T, url, body string) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("post %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func TestChat(t *testing.T) {
	s := start(t, Options{})
	for _, tc := range []struct {
		name, body, content, finish string
		prompt, completion          int
	}{
		{"string", `{"model":"m","messages":[{"role":"system","content":"be nice"},{"role":"user","content":"hello  there world"}]}`,
			"echo: hello there world", "stop", 5, 4},
		{"parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"one two"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"three"}]}]}`,
			"echo: one two three", "stop", 3, 4},
		{"last user", `{"messages":[{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":"second"}]}`,
			"echo: second", "stop", 3, 2},
		{"max_tokens", `{"messages":[{"role":"user","content":"a b c d e"}],"max_tokens":2}`,
			"echo: a b", "length", 5, 3},
		{"max_completion_tokens wins", `{"messages":[{"role":"user","content":"a b c d e"}],"max_tokens":2,"max_completion_tokens":4}`,
			"echo: a b c d", "length", 5, 5},
		{"limit not reached", `{"messages":[{"role":"user","content":"a b"}],"max_tokens":2}`,
			"echo: a b", "stop", 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := post(t, s.URL()+"/chat/completions", tc.body)
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			var got struct {
				ID      string
				Object  string
				Created int64
				Model   string
				Choices []struct {
					Index   int
					Message struct {
						Role    string
						Content string
					}
					FinishReason string `json:"finish_reason"`
				}
				Usage struct {
					Prompt     int `json:"prompt_tokens"`
					Completion int `json:"completion_tokens"`
					Total      int `json:"total_tokens"`
				}
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" || got.Created != echo.DefaultCreated {
				t.Errorf("header fields = %q %q %d", got.ID, got.Object, got.Created)
			}
			wantModel := "stand-in"
			if strings.Contains(tc.body, `"model":"m"`) {
				wantModel = "m"
			}
			if got.Model != wantModel {
				t.Errorf("model = %q, want %q", got.Model, wantModel)
			}
			if len(got.Choices) != 1 {
				t.Fatalf("choices = %+v", got.Choices)
			}
			c := got.Choices[0]
			if c.Message.Role != "assistant" || c.Message.Content != tc.content || c.FinishReason != tc.finish {
				t.Errorf("choice = %+v, want content %q finish %q", c, tc.content, tc.finish)
			}
			if got.Usage.Prompt != tc.prompt || got.Usage.Completion != tc.completion || got.Usage.Total != tc.prompt+tc.completion {
				t.Errorf("usage = %+v, want prompt %d completion %d", got.Usage, tc.prompt, tc.completion)
			}
			_, _, again := post(t, s.URL()+"/chat/completions", tc.body)
			if !bytes.Equal(body, again) {
				t.Errorf("answers differ:\n%s\n%s", body, again)
			}
		})
	}
}

func TestNow(t *testing.T) {
	s := start(t, Options{Now: func() time.Time { return time.Unix(1234, 0) }})
	_, _, body := post(t, s.URL()+"/completions", `{"prompt":"x"}`)
	if !bytes.Contains(body, []byte(`"created":1234`)) {
		t.Errorf("body = %s, want created 1234", body)
	}
}

func TestCompletions(t *testing.T) {
	s := start(t, Options{})
	status, _, body := post(t, s.URL()+"/completions", `{"model":"m","prompt":["one two three","four"],"max_tokens":2}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var got struct {
		ID      string
		Object  string
		Choices []struct {
			Index        int
			Text         string
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.ID, "cmpl-") || got.Object != "text_completion" || len(got.Choices) != 2 {
		t.Fatalf("answer = %s", body)
	}
	if c := got.Choices[0]; c.Index != 0 || c.Text != "echo: one two" || c.FinishReason != "length" {
		t.Errorf("choice 0 = %+v", c)
	}
	if c := got.Choices[1]; c.Index != 1 || c.Text != "echo: four" || c.FinishReason != "stop" {
		t.Errorf("choice 1 = %+v", c)
	}
	if got.Usage.Prompt != 4 || got.Usage.Completion != 5 {
		t.Errorf("usage = %+v", got.Usage)
	}
}

func TestEmbeddings(t *testing.T) {
	s := start(t, Options{})
	type answer struct {
		Object string
		Model  string
		Data   []struct {
			Object    string
			Index     int
			Embedding json.RawMessage
		}
	}
	get := func(body string) answer {
		t.Helper()
		status, _, b := post(t, s.URL()+"/embeddings", body)
		if status != 200 {
			t.Fatalf("status %d: %s", status, b)
		}
		var a answer
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := get(`{"input":["alpha","beta","alpha"]}`)
	if a.Object != "list" || a.Model != "stand-in" || len(a.Data) != 3 {
		t.Fatalf("answer = %+v", a)
	}
	vecs := make([][]float32, 3)
	for i, d := range a.Data {
		if d.Object != "embedding" || d.Index != i {
			t.Errorf("item %d = %+v", i, d)
		}
		if err := json.Unmarshal(d.Embedding, &vecs[i]); err != nil {
			t.Fatal(err)
		}
		if len(vecs[i]) != 8 {
			t.Errorf("dimension %d, want 8", len(vecs[i]))
		}
		var norm float64
		for _, v := range vecs[i] {
			norm += float64(v) * float64(v)
		}
		if math.Abs(norm-1) > 1e-5 {
			t.Errorf("norm² = %v, want 1", norm)
		}
	}
	if string(a.Data[0].Embedding) != string(a.Data[2].Embedding) || string(a.Data[0].Embedding) == string(a.Data[1].Embedding) {
		t.Error("embeddings are not a function of the input")
	}

	one := get(`{"input":"alpha","dimensions":20}`)
	var v20 []float32
	if err := json.Unmarshal(one.Data[0].Embedding, &v20); err != nil || len(v20) != 20 {
		t.Errorf("dimensions 20: %v %d", err, len(v20))
	}

	b64 := get(`{"input":"alpha","encoding_format":"base64"}`)
	var s64 string
	if err := json.Unmarshal(b64.Data[0].Embedding, &s64); err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(s64)
	if err != nil || len(raw) != 32 {
		t.Fatalf("base64: %v, %d bytes", err, len(raw))
	}
	for i := range 8 {
		if f := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); f != vecs[0][i] {
			t.Errorf("base64 value %d = %v, want %v", i, f, vecs[0][i])
		}
	}
}

func TestModels(t *testing.T) {
	s := start(t, Options{})
	resp, err := http.Get(s.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"object":"list"`)) || !bytes.Contains(b, []byte(`"id":"stand-in"`)) {
		t.Errorf("GET /models = %d %s", resp.StatusCode, b)
	}
	if s.Requests() != 0 {
		t.Errorf("Requests() = %d after a GET, want 0", s.Requests())
	}
}

func TestBadRequests(t *testing.T) {
	s := start(t, Options{})
	for _, tc := range []struct{ path, body string }{
		{"/chat/completions", `{"messages":`},
		{"/chat/completions", `[1,2]`},
		{"/chat/completions", `{"messages":[]}`},
		{"/chat/completions", `{"messages":"x"}`},
		{"/completions", `{}`},
		{"/embeddings", `{"input":5}`},
		{"/embeddings", `{"input":"x","dimensions":0}`},
	} {
		status, _, body := post(t, s.URL()+tc.path, tc.body)
		var e struct {
			Error struct{ Message, Type string }
		}
		if status != 400 || json.Unmarshal(body, &e) != nil || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Errorf("POST %s %s = %d %s, want a 400 OpenAI error", tc.path, tc.body, status, body)
		}
	}
	if status, _, _ := post(t, s.URL()+"/nope", `{}`); status != 404 {
		t.Errorf("unknown path: status %d, want 404", status)
	}
	if s.Requests() != 7 {
		t.Errorf("Requests() = %d, want 7", s.Requests())
	}
}

func TestFaults(t *testing.T) {
	s := start(t, Options{Fault: func(n int64, r *http.Request, body []byte) Fault {
		switch n {
		case 1:
			return Fault{Status: 429, Header: http.Header{"Retry-After": {"7"}}}
		case 2:
			return Fault{Status: 500, Body: "oops"}
		case 3:
			return Fault{Close: true}
		case 4:
			return Fault{Header: http.Header{"X-Request-Id": {"abc"}}}
		case 5:
			return Fault{Truncate: true}
		case 6:
			return Fault{Delay: time.Millisecond}
		}
		return Fault{}
	}})
	status, h, body := post(t, s.URL()+"/completions", `{"prompt":"x"}`)
	if status != 429 || h.Get("Retry-After") != "7" || !bytes.Contains(body, []byte("rate_limit_error")) {
		t.Errorf("fault 1 = %d %v %s", status, h, body)
	}
	if status, _, body := post(t, s.URL()+"/completions", `{"prompt":"x"}`); status != 500 || string(body) != "oops" {
		t.Errorf("fault 2 = %d %s", status, body)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL()+"/completions", strings.NewReader(`{"prompt":"x"}`))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("fault 3: got status %d, want a transport error", resp.StatusCode)
	}
	if status, h, _ := post(t, s.URL()+"/completions", `{"prompt":"x"}`); status != 200 || h.Get("X-Request-Id") != "abc" {
		t.Errorf("fault 4 = %d %v", status, h)
	}
	_, _, whole := post(t, s.URL()+"/completions", `{"prompt":"x"}`)                        // 5: truncated
	if _, _, body := post(t, s.URL()+"/completions", `{"prompt":"x"}`); !json.Valid(body) { // 6: delayed
		t.Errorf("fault 6 (delay) = %s, want the normal answer", body)
	} else if !bytes.HasPrefix(body, whole) || json.Valid(whole) || len(whole) == 0 {
		t.Errorf("fault 5 (truncate) = %q, want a non-empty prefix of %q that is not JSON", whole, body)
	}
	if s.Requests() != 6 {
		t.Errorf("Requests() = %d, want 6", s.Requests())
	}
}

func TestChaos(t *testing.T) {
	c := &Chaos{Seed: 7, Error: 0.2, Reset: 0.2, Truncate: 0.2, Hang: 0.2, Latency: time.Second}
	same := &Chaos{Seed: 7, Error: 0.2, Reset: 0.2, Truncate: 0.2, Hang: 0.2, Latency: time.Second}
	other := &Chaos{Seed: 8, Error: 0.2, Reset: 0.2, Truncate: 0.2, Hang: 0.2, Latency: time.Second}
	counts := map[string]int{}
	differ := 0
	const n = 2000
	for i := int64(n); i >= 1; i-- { // any order gives the same fault for the same i
		f := c.Fault(i, nil, nil)
		if g := same.Fault(i, nil, nil); f.Status != g.Status || f.Close != g.Close || f.Truncate != g.Truncate || f.Hang != g.Hang || f.Delay != g.Delay {
			t.Fatalf("POST %d: seed 7 gave %+v, then %+v", i, f, g)
		}
		if g := other.Fault(i, nil, nil); f.Delay != g.Delay {
			differ++
		}
		if f.Delay < 0 || f.Delay >= time.Second {
			t.Fatalf("POST %d: delay %s outside [0, 1s)", i, f.Delay)
		}
		switch {
		case f.Status == 500:
			counts["error"]++
		case f.Close:
			counts["reset"]++
		case f.Truncate:
			counts["truncate"]++
		case f.Hang:
			counts["hang"]++
		default:
			counts["none"]++
		}
	}
	for _, k := range []string{"error", "reset", "truncate", "hang", "none"} {
		if got := counts[k]; got < n/5-n/10 || got > n/5+n/10 {
			t.Errorf("%s: %d of %d POSTs, want about a fifth", k, got, n)
		}
	}
	if differ < n/2 {
		t.Errorf("seeds 7 and 8 gave the same delay for %d of %d POSTs", n-differ, n)
	}
	c.SetStorm(Fault{Status: 503})
	if f := c.Fault(1, nil, nil); f.Status != 503 || f.Delay != 0 {
		t.Errorf("during a storm: %+v, want the storm's fault", f)
	}
	c.ClearStorm()
	if f, g := c.Fault(1, nil, nil), same.Fault(1, nil, nil); f.Status != g.Status || f.Close != g.Close || f.Truncate != g.Truncate || f.Hang != g.Hang || f.Delay != g.Delay {
		t.Errorf("after the storm: %+v, want the seeded fault again", f)
	}
}

func TestHangUntilClientGoes(t *testing.T) {
	arrived := make(chan struct{})
	s := start(t, Options{Fault: func(int64, *http.Request, []byte) Fault {
		close(arrived)
		return Fault{Hang: true}
	}})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/completions", strings.NewReader(`{"prompt":"x"}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-arrived
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("hung request: err = %v, want context.Canceled", err)
	}
}

func TestStopRestart(t *testing.T) {
	s := start(t, Options{})
	url := s.URL()
	if status, _, _ := post(t, url+"/completions", `{"prompt":"x"}`); status != 200 {
		t.Fatalf("status %d", status)
	}
	s.Stop()
	_, err := client.Post(url+"/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after Stop: err = %v, want connection refused", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.URL() != url {
		t.Errorf("URL changed from %s to %s", url, s.URL())
	}
	if status, _, _ := post(t, url+"/completions", `{"prompt":"x"}`); status != 200 {
		t.Errorf("after Restart: status %d", status)
	}
}

func TestHandler(t *testing.T) {
	s := NewServer(Options{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	if status, _, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`); status != 200 || !bytes.Contains(body, []byte("echo: hi")) {
		t.Errorf("via Handler: %d %s", status, body)
	}
	if s.Requests() != 1 {
		t.Errorf("Requests() = %d, want 1", s.Requests())
	}
}
