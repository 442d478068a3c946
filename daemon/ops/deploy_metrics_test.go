package ops

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The deploy manifests (the KEDA ScaledObject, the ServiceMonitor) query
// batchd's metrics by name: every batchd_ name they mention must be one
// this collector describes, or autoscaling would watch nothing.
func TestDeployManifestsNameExportedMetrics(t *testing.T) {
	described := map[string]bool{}
	ch := make(chan *prometheus.Desc)
	go func() {
		newCollector(&fakeState{}).Describe(ch)
		close(ch)
	}()
	name := regexp.MustCompile(`fqName: "([a-z_:]+)"`)
	for d := range ch {
		if m := name.FindStringSubmatch(d.String()); m != nil {
			described[m[1]] = true
		}
	}
	if !described["batchd_inbox_waiting"] || !described["batchd_requests_waiting"] {
		t.Fatalf("the collector does not describe the autoscaling metrics: %v", described)
	}
	root := filepath.Join("..", "..", "deploy")
	used := regexp.MustCompile(`\bbatchd_[a-z_]+`)
	checked := 0
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range used.FindAllString(string(b), -1) {
			checked++
			if !described[m] {
				t.Errorf("%s names %s, which batchd does not export", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no manifest under deploy/ names a batchd metric: the ScaledObject moved?")
	}
}
