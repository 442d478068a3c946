package daemon_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// With keys on, a browser that opens /?key=KEY once gets the status page,
// and the page's own refreshes (fetches of status.json, which carry only
// the cookie) keep working: daemon/ops' browser.mjs drives a real chromium
// against a real daemon. It needs what scripts/ci-browser.sh installs, named
// by BATCHD_PLAYWRIGHT_DIR; it skips without it unless BATCHD_REQUIRE_BROWSER=1.
func TestStatusPageInBrowserWithKey(t *testing.T) {
	node, nodeErr := exec.LookPath("node")
	chromium := os.Getenv("BATCHD_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	_, chromiumErr := os.Stat(chromium)
	pwDir := os.Getenv("BATCHD_PLAYWRIGHT_DIR")
	if nodeErr != nil || chromiumErr != nil || pwDir == "" {
		msg := "browser test: needs node, chromium and BATCHD_PLAYWRIGHT_DIR (scripts/ci-browser.sh)"
		if os.Getenv("BATCHD_REQUIRE_BROWSER") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	pwDir, _ = filepath.Abs(pwDir)

	// A slow engine keeps the batch running while the page watches it.
	e := newAPIEnv(t, openaitest.Options{Fault: func(int64, *http.Request, []byte) openaitest.Fault {
		time.Sleep(5 * time.Millisecond)
		return openaitest.Fault{}
	}}, func(c *daemon.Config) { c.Pipeline.Workers = 2 })
	e.drop("slow.jsonl", chatBatch(20000, "slow"))
	var id string
	waitFor(t, 60*time.Second, "the batch to start", func() bool {
		if o := e.object("slow"); o != nil && o.RequestCounts.Completed > 0 {
			id = o.ID
		}
		return id != ""
	})

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("ops", "testdata", "browser.mjs"), e.base+"/?key="+e.key)
	cmd.Env = append(os.Environ(), "BATCHD_CHROMIUM="+chromium, "BATCHD_PLAYWRIGHT_DIR="+pwDir, "BATCHD_BATCH="+id, "BATCHD_CHART=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("browser.mjs: %v\n%s", err, out)
	}
	t.Logf("browser.mjs: %s", out)
}
