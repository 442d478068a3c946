package daemon_test

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// Memory per request is bounded by what the model and its cache can hold,
// not by what the request asks: a streamed completion with max_tokens
// 2^31-1, after hostile bodies, ends when the cache is full and leaves the
// heap about where it was (it once reserved 8 GiB for its token buffer).
func TestHugeMaxTokensStreamKeepsMemoryBounded(t *testing.T) {
	model := demoModel(t)
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.Engine = "native"
		c.Native.Models = []native.ModelConfig{{Path: model}}
		c.Native.KVCacheBytes = 1 << 20
	})
	client := &http.Client{Timeout: 5 * time.Minute}
	for _, body := range []string{
		`{"prompt":[1,99999999],"max_tokens":2147483647}`,
		`{"prompt":"x","max_tokens":2147483647,"n":4}`,
		`{"prompt":"x","max_tokens":2147483647,"logprobs":5,"stream":true}`,
	} {
		req, _ := http.NewRequest("POST", e.base+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.key)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req, _ := http.NewRequest("POST", e.base+"/v1/completions", strings.NewReader(`{"prompt":"Once upon a time","max_tokens":2147483647,"ignore_eos":true,"stream":true}`))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	streamToLength(t, resp, &before, "one request")
}
