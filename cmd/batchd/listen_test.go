package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/internal/syncbuf"
)

// `batchd run` takes listen: off from its config file as it takes --listen
// off (it used to fail with "missing port in address"), and refuses a
// keyless address beyond loopback, naming both ways out.
func TestRunListenFromConfig(t *testing.T) {
	t.Setenv("BATCHD_LISTEN", "")
	t.Setenv("BATCHD_API_KEY", "")
	t.Setenv("BATCHD_API_KEYS", "")
	t.Setenv("BATCHD_API_OPEN", "")
	srv := openaitest.NewServer(openaitest.Options{})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	config := func(listen string) string {
		return writeFile(t, filepath.Join(dir, "batchd.yaml"),
			"listen: "+listen+"\nengine: openai\nopenai:\n  urls: ["+srv.URL()+"]\n")
	}

	t.Run("off", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stderr := new(syncbuf.Buffer)
		done := make(chan int, 1)
		go func() {
			done <- cmdRun(ctx, []string{"--config", config("off"), "--data", filepath.Join(dir, "data")}, io.Discard, stderr)
		}()
		waitFor(t, 60*time.Second, "batchd to start", func() bool {
			select {
			case code := <-done:
				t.Fatalf("batchd exited with %d at start: %s", code, stderr)
			default:
			}
			return strings.Contains(stderr.String(), "batchd: watching")
		})
		cancel()
		if code := <-done; code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
	})
	t.Run("beyond loopback without keys", func(t *testing.T) {
		code, _, stderr := cli(t, "run", "--config", config("0.0.0.0:0"), "--data", filepath.Join(dir, "data"))
		if code != exitUsage || !strings.Contains(stderr, "api.keys") || !strings.Contains(stderr, "api.open: true") {
			t.Fatalf("exit %d, stderr %q; want %d naming api.keys and api.open", code, stderr, exitUsage)
		}
	})
}
