package daemon_test

import (
	"os"
	"testing"

	"github.com/batchd/batchd/daemon"
)

// The Kubernetes example's config.yaml (deploy/kubernetes/base, mounted from
// its ConfigMap) loads and validates with the variables the StatefulSet sets
// from its Secret, so a key batchd does not know cannot ship there.
// deploy/kubernetes/manifesttest checks the manifests around it.
func TestKubernetesConfigLoads(t *testing.T) {
	for k, v := range map[string]string{
		"BATCHD_API_KEY": "sk-example", "BATCHD_WEBHOOK_TOKEN": "tok",
		"BATCHD_S3_ACCESS_KEY": "ak", "BATCHD_S3_SECRET_KEY": "sk",
	} {
		t.Setenv(k, v)
	}
	cfg, err := daemon.LoadFile("../deploy/kubernetes/base/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.ApplyEnv(&cfg, os.Getenv); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if !cfg.IsBucket() || cfg.S3.WebhookToken != "tok" || cfg.S3.AccessKey != "ak" || cfg.Listen != "0.0.0.0:8080" || cfg.Data != "/data" {
		t.Fatalf("config: source %q, webhook token %q, access key %q, listen %q, data %q",
			cfg.Source, cfg.S3.WebhookToken, cfg.S3.AccessKey, cfg.Listen, cfg.Data)
	}
}
