package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// The mix that once grew the daemon to 8.5–8.9 GB: hostile bodies to the
// native engine (stories260K, its default KV cache), then an online stream
// with max_tokens 2^31-1. The growth was the token buffer each sequence
// reserved for its whole output: 2^31-1 int32s, 8 GiB, for one request
// (later capped by the cache: 512 KiB a sequence here, so 4 GiB for a
// request of 64 prompts × n 128). Reserved, not touched, such a buffer
// costs no RSS on fresh pages, which is why the growth came and went: it
// showed when Go reused pages an earlier request had freed, which it
// zeroes, touching all 8 GiB. HeapSys counts reserved heap whether touched
// or not, so this test fails every time that cause returns.
func TestHostileNativeBodiesThenHugeStreamKeepMemoryBounded(t *testing.T) {
	dir := os.Getenv("BATCHD_STORIES260K")
	if dir == "" {
		t.Skip("BATCHD_STORIES260K is unset: set it to the directory holding stories260K.gguf to run this test")
	}
	model := filepath.Join(dir, "stories260K.gguf")
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.Engine = "native"
		c.Native.Models = []native.ModelConfig{{Path: model}}
	})
	client := &http.Client{Timeout: 5 * time.Minute}
	post := func(ctx context.Context, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", e.base+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// firstChunk streams body until its first chunk of text, then hangs up,
	// as a hostile client does, and says whether text came.
	firstChunk := func(body string) bool {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp := post(ctx, body)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: {") {
				return resp.StatusCode == 200
			}
		}
		return false
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	bias := map[string]int{}
	for i := range 1024 {
		bias[fmt.Sprint(i%512)] = -100 + i%200
	}
	stops := make([]string, 64)
	for i := range stops {
		stops[i] = strings.Repeat("z", 1+i)
	}
	biasJSON, _ := json.Marshal(bias)
	stopJSON, _ := json.Marshal(stops)
	prompts, _ := json.Marshal(slices.Repeat([]string{"Once upon a time"}, 64))
	for _, body := range []string{
		`{"prompt":` + string(prompts) + `,"max_tokens":2147483647,"n":128,"ignore_eos":true,"stream":true}`,
		`{"prompt":"x","max_tokens":2147483647,"n":128,"logprobs":5,"echo":true,"stream":true,"logit_bias":` + string(biasJSON) + `,"stop":` + string(stopJSON) + `}`,
		`{"prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"max_tokens":2147483647,"n":128,"logprobs":5,"stream":true,"frequency_penalty":2,"presence_penalty":-2,"repetition_penalty":3,"min_tokens":100000}`,
	} {
		if !firstChunk(body) {
			t.Fatalf("no text streamed for %.80s…", body)
		}
	}
	for _, body := range []string{
		`{"prompt":[1,99999999],"max_tokens":2147483647}`,
		`{"prompt":"x","max_tokens":2147483647,"n":129}`,
		`{"prompt":"x","max_tokens":2147483648}`,
	} {
		resp := post(context.Background(), body)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("%s: status %d, want 400", body, resp.StatusCode)
		}
	}
	// A stream cut after its first chunk, then one that runs to the end of
	// the context.
	if !firstChunk(`{"prompt":"Once upon a time","max_tokens":2147483647,"ignore_eos":true,"stream":true}`) {
		t.Fatal("no text streamed")
	}
	resp := post(context.Background(), `{"prompt":"Once upon a time","max_tokens":2147483647,"ignore_eos":true,"stream":true}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	streamToLength(t, resp, &before, "the hostile bodies and the stream")
}

// streamToLength reads resp, a stream, to its end, which must be
// finish_reason length (the cache or the context full), then fails t when
// the heap has grown by more than 256 MiB since before (HeapSys: reserved,
// touched or not).
func streamToLength(t *testing.T, resp *http.Response, before *runtime.MemStats, what string) {
	t.Helper()
	finish := ""
	for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
		if strings.Contains(sc.Text(), `"finish_reason":"length"`) {
			finish = "length"
		}
	}
	if finish != "length" {
		t.Fatal("the stream did not end with finish_reason length (the cache or the context full)")
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("heap: %d MiB reserved before, %d MiB after", before.HeapSys>>20, after.HeapSys>>20)
	if grew := int64(after.HeapSys) - int64(before.HeapSys); grew > 256<<20 {
		t.Fatalf("the heap grew by %d MiB for %s", grew>>20, what)
	}
}
