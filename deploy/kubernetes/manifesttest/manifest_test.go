package manifesttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func renderAndCheck(t *testing.T, dir string) (*Rendered, error) {
	t.Helper()
	objs, err := Render(dir)
	if err != nil {
		return nil, err
	}
	r, err := Decode(objs)
	if err != nil {
		return nil, err
	}
	return r, Check(r)
}

func TestOverlays(t *testing.T) {
	for _, overlay := range []string{"cpu", "gpu"} {
		t.Run(overlay, func(t *testing.T) {
			r, err := renderAndCheck(t, filepath.Join("..", "overlays", overlay))
			if err != nil {
				t.Fatal(err)
			}
			c := r.StatefulSets[0].Spec.Template.Spec.Containers[0]
			gpu, hasGPU := c.Resources.Limits["nvidia.com/gpu"]
			tolerates := len(r.StatefulSets[0].Spec.Template.Spec.Tolerations) > 0
			switch overlay {
			case "cpu":
				if hasGPU || tolerates || c.Image != "batchd:latest" {
					t.Errorf("cpu overlay: image %s, GPU limit %v, tolerations %v; want the CPU image and no GPU", c.Image, hasGPU, tolerates)
				}
			case "gpu":
				if !hasGPU || gpu.Value() != 1 || c.Resources.Requests["nvidia.com/gpu"] != gpu || !tolerates || c.Image != "batchd:cuda" {
					t.Errorf("gpu overlay: image %s, GPU limit %v (%s), request %v, tolerations %v; want the CUDA image, one GPU, tolerated",
						c.Image, hasGPU, gpu.String(), c.Resources.Requests["nvidia.com/gpu"], tolerates)
				}
				if r.StatefulSets[0].Spec.Template.Spec.NodeSelector["nvidia.com/gpu.present"] != "true" {
					t.Errorf("gpu overlay: no nodeSelector for GPU nodes")
				}
			}
		})
	}
}

// copyTree copies deploy/kubernetes (base and overlays) to a temporary
// directory, for a test to break.
func copyTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, sub := range []string{"base", "overlays"} {
		src := filepath.Join("..", sub)
		err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel("..", p)
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(dst, rel), 0o755)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// edit replaces old (which must occur) with new in file under dir.
func edit(t *testing.T, dir, file, old, new string) {
	t.Helper()
	p := filepath.Join(dir, file)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s does not contain %q", file, old)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrokenManifestsFail breaks a copy of the manifests in one way each and
// checks that the check fails, naming the problem.
func TestBrokenManifestsFail(t *testing.T) {
	for _, tc := range []struct {
		name, file, old, new string
		want                 []string
	}{
		{"unknown StatefulSet field", "base/statefulset.yaml", "  podManagementPolicy:", "  replicaz: 3\n  podManagementPolicy:",
			[]string{"StatefulSet/batchd", "statefulset.yaml", `unknown field "replicaz"`}},
		{"unknown container field", "base/statefulset.yaml", "          args: [", "          argz: [\"x\"]\n          args: [",
			[]string{`unknown field "argz"`}},
		{"unknown ScaledObject field", "base/scaledobject.yaml", "  minReplicaCount: 1\n", "  minReplicaCount: 1\n  minReplicas: 1\n",
			[]string{"ScaledObject/batchd", `unknown field "minReplicas"`}},
		{"unknown ServiceMonitor field", "base/servicemonitor.yaml", "      interval: 15s\n", "      interval: 15s\n      scrapeEvery: 15s\n",
			[]string{"ServiceMonitor/batchd", `unknown field "scrapeEvery"`}},
		{"duplicate key", "base/pdb.yaml", "  maxUnavailable: 1\n", "  maxUnavailable: 1\n  maxUnavailable: 2\n",
			[]string{"pdb.yaml", "maxUnavailable"}},
		{"unimplemented kustomize field", "base/kustomization.yaml", "resources:\n", "namePrefix: x-\nresources:\n",
			[]string{"kustomization.yaml", `unknown field "namePrefix"`}},
		{"patch on a missing path", "overlays/gpu/statefulset-gpu.yaml", "/spec/template/spec/containers/0/image", "/spec/template/spec/containers/1/image",
			[]string{"statefulset-gpu.yaml"}},
		{"readiness on /healthz", "base/statefulset.yaml", "httpGet: {path: /readyz, port: http}", "httpGet: {path: /healthz, port: http}",
			[]string{"readinessProbe", `want "/readyz"`}},
		{"missing Secret key", "base/statefulset.yaml", "key: s3-secret-key", "key: s3-secret",
			[]string{`Secret "batchd" has no key "s3-secret"`}},
		{"metric batchd does not export", "base/scaledobject.yaml", "sum(batchd_requests_waiting", "sum(batchd_requests_queued",
			[]string{"batchd does not export batchd_requests_queued", "no trigger on batchd_requests_waiting"}},
		{"ScaledObject on another target", "base/scaledobject.yaml", "    name: batchd\n", "    name: batchd-old\n",
			[]string{"scaleTargetRef"}},
		{"grace period too short", "base/statefulset.yaml", "terminationGracePeriodSeconds: 60", "terminationGracePeriodSeconds: 30",
			[]string{"terminationGracePeriodSeconds must exceed shutdown_grace (30s)"}},
		{"shutdown_grace raised past the grace period", "base/config.yaml", "listen: 0.0.0.0:8080\n", "listen: 0.0.0.0:8080\nshutdown_grace: 2m\n",
			[]string{"shutdown_grace (2m0s)"}},
		{"webhook Job on another bucket", "base/minio-webhook-job.yaml", "{name: BUCKET, value: batches}", "{name: BUCKET, value: other}",
			[]string{`config.yaml's source is "s3://batches/team-a"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyTree(t)
			edit(t, dir, tc.file, tc.old, tc.new)
			overlay := "cpu"
			if strings.HasPrefix(tc.file, "overlays/gpu") {
				overlay = "gpu"
			}
			_, err := renderAndCheck(t, filepath.Join(dir, "overlays", overlay))
			if err == nil {
				t.Fatal("the broken manifests passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestDockerfiles(t *testing.T) {
	for _, f := range []string{"Dockerfile", "Dockerfile.cuda"} {
		if err := CheckDockerfile(filepath.Join("..", "..", "container", f)); err != nil {
			t.Error(err)
		}
	}
}

func TestBrokenDockerfileFails(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "container", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"root", "USER 65532:65532", "USER root", "is root"},
		{"no user", "USER 65532:65532\n", "", "no USER"},
		{"no healthcheck", "HEALTHCHECK", "# HEALTHCHECK", "no HEALTHCHECK"},
		{"shell healthcheck", `CMD ["/usr/local/bin/batchd", "healthcheck"]`, "CMD curl -f http://localhost:8080/healthz", "HEALTHCHECK must run"},
		{"no volume", "VOLUME /data", "", "VOLUME /data"},
		{"cgo", "CGO_ENABLED=0 ", "", "without CGO_ENABLED=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(raw), tc.old) {
				t.Fatalf("Dockerfile does not contain %q", tc.old)
			}
			p := filepath.Join(t.TempDir(), "Dockerfile")
			if err := os.WriteFile(p, []byte(strings.Replace(string(raw), tc.old, tc.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			err := CheckDockerfile(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
