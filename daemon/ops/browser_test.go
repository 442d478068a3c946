package ops

import (
	"context"
	"github.com/batchd/batchd/pipeline"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestStatusPageInBrowser loads the status page in a real chromium, driven by
// testdata/browser.mjs through playwright-core, and checks that the running
// batch's progress bar grows as the page refreshes itself. scripts/ci-browser.sh
// installs what it needs. It skips when node, chromium or playwright-core is
// missing, unless BATCHD_REQUIRE_BROWSER=1.
func TestStatusPageInBrowser(t *testing.T) {
	node, chromium, pwDir := browserTools(t)

	// Each look at the batches moves the running batch on by 1%.
	src := &fakeState{
		batches: []BatchView{
			{ID: "b-done", Name: "yesterday", Status: pipeline.StatusCompleted, Total: 50, Completed: 50,
				CreatedAt: 1_700_000_000, EndedAt: 1_700_000_100},
			{ID: "b-running", Name: "today", Status: pipeline.StatusInProgress, Endpoint: "/v1/chat/completions",
				Total: 1000, Completed: 100, CreatedAt: 1_700_001_000, InProgressAt: 1_700_001_001, Rate: 25},
		},
		engine:        EngineView{Name: "native", InFlight: 8, Queued: 100, PrefixCacheHitRate: 0.5},
		advance:       "b-running",
		step:          10,
		tokensPerStep: 500,
	}
	// Give the chart something to draw.
	s := NewSampler(src, 10*time.Second, time.Hour)
	now := time.Now()
	for i := range 5 {
		mustSample(t, s, now.Add(time.Duration(i-4)*10*time.Second))
	}
	srv := httptest.NewServer(NewStatusPage(src, s).Handler())
	defer srv.Close()

	// The deadline only keeps a wedged browser from hanging the test run.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "browser.mjs"), srv.URL+"/")
	cmd.Env = append(os.Environ(),
		"BATCHD_CHROMIUM="+chromium,
		"BATCHD_PLAYWRIGHT_DIR="+pwDir,
		"BATCHD_BATCH=b-running",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("browser.mjs: %v\n%s", err, out)
	}
	t.Logf("browser.mjs: %s", out)
}

// browserTools finds node, chromium and the directory holding playwright-core's
// node_modules, or skips (fails, with BATCHD_REQUIRE_BROWSER=1) naming what is
// missing.
func browserTools(t *testing.T) (node, chromium, pwDir string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("BATCHD_REQUIRE_BROWSER") == "1" {
			t.Fatalf(format+" (BATCHD_REQUIRE_BROWSER=1; scripts/ci-browser.sh installs it)", args...)
		}
		t.Skipf(format+"; run scripts/ci-browser.sh to install it", args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("browser test: node is not on PATH")
	}
	chromium = os.Getenv("BATCHD_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if info, err := os.Stat(chromium); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		missing("browser test: no chromium at %s (set BATCHD_CHROMIUM)", chromium)
	}
	pwDir = os.Getenv("BATCHD_PLAYWRIGHT_DIR")
	if pwDir == "" {
		root, err := repoRoot()
		if err != nil {
			t.Fatalf("finding the repository root: %v", err)
		}
		pwDir = filepath.Join(root, ".cache", "npm-playwright")
	}
	pwDir, err = filepath.Abs(pwDir)
	if err != nil {
		t.Fatalf("resolving BATCHD_PLAYWRIGHT_DIR: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pwDir, "node_modules", "playwright-core", "package.json")); err != nil {
		missing("browser test: no playwright-core under %s (set BATCHD_PLAYWRIGHT_DIR)", pwDir)
	}
	return node, chromium, pwDir
}

// repoRoot is the nearest directory above the package's that holds go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
