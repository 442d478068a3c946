package daemon_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// Validate refuses what would open the API by accident, naming the field
// and the ways out.
func TestValidateAccess(t *testing.T) {
	base := func() daemon.Config {
		cfg := daemon.DefaultConfig()
		cfg.Engine = "openai"
		return cfg
	}
	bad := []struct {
		name  string
		edit  func(*daemon.Config)
		wants []string
	}{
		{"empty key", func(c *daemon.Config) { c.API.Keys = []string{""} }, []string{"api.keys[0]: empty"}},
		{"blank second key", func(c *daemon.Config) { c.API.Keys = []string{"k", "  "} }, []string{"api.keys[1]: empty"}},
		{"open and keys", func(c *daemon.Config) { c.API.Keys, c.API.Open = []string{"k"}, true }, []string{"api.open", "api.keys"}},
		{"all interfaces", func(c *daemon.Config) { c.Listen = "0.0.0.0:8080" }, []string{"listen", "0.0.0.0:8080", "api.keys", "api.open: true"}},
		{"no host", func(c *daemon.Config) { c.Listen = ":8080" }, []string{"listen", "api.keys", "api.open: true"}},
		{"IPv6 any", func(c *daemon.Config) { c.Listen = "[::]:8080" }, []string{"listen", "api.keys", "api.open: true"}},
		{"a host name", func(c *daemon.Config) { c.Listen = "batchd.internal:8080" }, []string{"listen", "api.keys", "api.open: true"}},
		{"a LAN address", func(c *daemon.Config) { c.Listen = "10.1.2.3:8080" }, []string{"listen", "api.keys", "api.open: true"}},
		{"no port", func(c *daemon.Config) { c.Listen = "127.0.0.1" }, []string{"listen", "host:port"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.edit(&cfg)
			err := cfg.Validate()
			for _, want := range tc.wants {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %v, want one with %q", err, want)
				}
			}
		})
	}
	good := []struct {
		name string
		edit func(*daemon.Config)
	}{
		{"IPv4 loopback", func(c *daemon.Config) { c.Listen = "127.0.0.1:0" }},
		{"elsewhere in 127/8", func(c *daemon.Config) { c.Listen = "127.8.9.10:8080" }},
		{"IPv6 loopback", func(c *daemon.Config) { c.Listen = "[::1]:8080" }},
		{"localhost", func(c *daemon.Config) { c.Listen = "localhost:8080" }},
		{"all interfaces with a key", func(c *daemon.Config) { c.Listen, c.API.Keys = "0.0.0.0:8080", []string{"k"} }},
		{"all interfaces, open on purpose", func(c *daemon.Config) { c.Listen, c.API.Open = ":8080", true }},
		{"off", func(c *daemon.Config) { c.Listen = "off" }},
		{"empty", func(c *daemon.Config) { c.Listen = "" }},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.edit(&cfg)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A key that came from an unset variable is refused by name, with the
// variable, instead of leaving the API open.
func TestEmptyKeyFromUnsetVariable(t *testing.T) {
	load := func(content string) daemon.Config {
		t.Helper()
		cfg, err := daemon.LoadFile(writeConfig(t, "engine: openai\n"+content))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for _, tc := range []struct{ content, want string }{
		{"api:\n  keys: [${BATCHD_TEST_UNSET_KEY}]\n", "api.keys[0]: empty (is $BATCHD_TEST_UNSET_KEY set?)"},
		{"api:\n  keys:\n    - sk-one\n    - \"${BATCHD_TEST_UNSET_KEY}\"\n", "api.keys[1]: empty (is $BATCHD_TEST_UNSET_KEY set?)"},
		{"api:\n  keys: [\"${BATCHD_TEST_UNSET_KEY}${BATCHD_TEST_EMPTY_KEY}\"]\n",
			"api.keys[0]: empty (is $BATCHD_TEST_UNSET_KEY, $BATCHD_TEST_EMPTY_KEY set?)"},
		{"api:\n  keys: [\"\"]\n", "api.keys[0]: empty; give a key or remove the entry"},
	} {
		t.Setenv("BATCHD_TEST_EMPTY_KEY", "")
		cfg := load(tc.content)
		if err := cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.content, err, tc.want)
		}
		never := filepath.Join(t.TempDir(), "never")
		cfg.Data = never
		if err := daemon.New(cfg, nil).Open(context.Background()); err == nil {
			t.Errorf("%q: Open accepted an empty key", tc.content)
		}
	}
	// Set, the same file gives the key.
	t.Setenv("BATCHD_TEST_UNSET_KEY", "sk-from-env")
	cfg := load("api:\n  keys: [${BATCHD_TEST_UNSET_KEY}]\n")
	if err := cfg.Validate(); err != nil || len(cfg.API.Keys) != 1 || cfg.API.Keys[0] != "sk-from-env" {
		t.Errorf("keys %q, %v", cfg.API.Keys, err)
	}
}

// The example config's key comes from BATCHD_API_KEY: unset, it is an
// error naming the variable; the variable given to ApplyEnv alone (as the
// deploy manifests do, with no file) has the same effect as the file.
func TestExampleConfigNeedsItsKey(t *testing.T) {
	t.Setenv("BATCHD_API_KEY", "")
	cfg, err := daemon.LoadFile("../deploy/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "api.keys[0]: empty (is $BATCHD_API_KEY set?)") {
		t.Fatalf("example config without BATCHD_API_KEY: %v", err)
	}
	t.Setenv("BATCHD_API_KEY", "sk-example")
	if cfg, err = daemon.LoadFile("../deploy/config.example.yaml"); err != nil {
		t.Fatal(err)
	}
	fromFile := cfg.API.Keys
	env := map[string]string{"BATCHD_API_KEY": "sk-example"}
	noFile := daemon.DefaultConfig()
	if err := daemon.ApplyEnv(&noFile, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if len(fromFile) != 1 || fromFile[0] != "sk-example" || len(noFile.API.Keys) != 1 || noFile.API.Keys[0] != "sk-example" {
		t.Fatalf("keys from the file %q, from the environment alone %q", fromFile, noFile.API.Keys)
	}
	// A key in the environment replaces the file's empty one.
	t.Setenv("BATCHD_API_KEY", "")
	if cfg, err = daemon.LoadFile("../deploy/config.example.yaml"); err != nil {
		t.Fatal(err)
	}
	env = map[string]string{"BATCHD_API_KEYS": "sk-a, sk-b"}
	if err := daemon.ApplyEnv(&cfg, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if len(cfg.API.Keys) != 2 || cfg.API.Keys[1] != "sk-b" {
		t.Fatalf("keys %q", cfg.API.Keys)
	}
	cfg.Engine = "openai"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// BATCHD_API_OPEN says api.open; anything but a boolean is refused by name.
func TestAPIOpenFromEnvironment(t *testing.T) {
	cfg := daemon.DefaultConfig()
	cfg.Engine, cfg.Listen = "openai", "0.0.0.0:8080"
	if err := daemon.ApplyEnv(&cfg, func(k string) string {
		return map[string]string{"BATCHD_API_OPEN": "true"}[k]
	}); err != nil || !cfg.API.Open {
		t.Fatalf("BATCHD_API_OPEN=true: open %v, %v", cfg.API.Open, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	err := daemon.ApplyEnv(&cfg, func(k string) string { return map[string]string{"BATCHD_API_OPEN": "yes please"}[k] })
	if err == nil || !strings.Contains(err.Error(), "BATCHD_API_OPEN") {
		t.Fatalf("BATCHD_API_OPEN=yes please: %v", err)
	}
}

// listen: off in the file (or BATCHD_LISTEN=off) turns HTTP off, as the
// --listen off flag does.
func TestListenOffInConfig(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	for _, how := range []string{"file", "environment"} {
		t.Run(how, func(t *testing.T) {
			cfg, err := daemon.LoadFile(writeConfig(t, "listen: \"127.0.0.1:0\"\n"))
			if how == "file" {
				cfg, err = daemon.LoadFile(writeConfig(t, "listen: off\n"))
			}
			if err != nil {
				t.Fatal(err)
			}
			if how == "environment" {
				if err := daemon.ApplyEnv(&cfg, func(k string) string {
					return map[string]string{"BATCHD_LISTEN": "off"}[k]
				}); err != nil {
					t.Fatal(err)
				}
			}
			if cfg.Listen != "off" || !cfg.HTTPOff() {
				t.Fatalf("listen %q", cfg.Listen)
			}
			live := e.config()
			live.Listen = cfg.Listen
			d := daemon.New(live, nil)
			if err := d.Open(context.Background()); err != nil {
				t.Fatalf("open with listen off: %v", err)
			}
			addr := d.HTTPAddr()
			closeDaemon(t, d)
			if addr != "" {
				t.Fatalf("listen off serves HTTP on %s", addr)
			}
		})
	}
}

// native.models[].adapters comes through the YAML to the engine's config,
// whose Validate names a bad entry.
func TestNativeAdaptersInConfig(t *testing.T) {
	cfg, err := daemon.LoadFile(writeConfig(t, "engine: native\nnative:\n  models:\n    - name: m\n      path: /models/m.gguf\n      adapters:\n        sql: /adapters/sql\n        m: /adapters/m\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Native.Models[0].Adapters; len(got) != 2 || got["sql"] != "/adapters/sql" {
		t.Fatalf("adapters %v", got)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "native.models[0].adapters.m: the name is already") {
		t.Fatalf("validate: %v", err)
	}
}

// native.models[].draft comes through the YAML; it must name a model of
// native.models.
func TestNativeDraftInConfig(t *testing.T) {
	cfg, err := daemon.LoadFile(writeConfig(t, "engine: native\nnative:\n  models:\n    - {name: big, path: /models/big.gguf, draft: small}\n    - {name: small, path: /models/small.gguf}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Native.Models[0].Draft; got != "small" {
		t.Fatalf("draft %q", got)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	cfg.Native.Models[0].Draft = "tiny"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `native.models[0].draft: "tiny" is not the name of a model`) {
		t.Fatalf("validate: %v", err)
	}
}

// openai.routes comes through the YAML: without openai.urls it is enough,
// its entries are checked by name, and the engine built routes by model.
func TestOpenAIRoutesInConfig(t *testing.T) {
	cfg, err := daemon.LoadFile(writeConfig(t, "engine: openai\nopenai:\n  routes:\n    - {model: llama, urls: [\"http://127.0.0.1:8001/v1\"]}\n    - {model: qwen, urls: [\"http://127.0.0.1:8002/v1\", \"http://127.0.0.1:8003/v1\"], api_key: k2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.OpenAI.Routes; len(got) != 2 || got[1].Model != "qwen" || len(got[1].URLs) != 2 || got[1].APIKey != "k2" {
		t.Fatalf("routes %+v", got)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	eng, err := cfg.NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	if ml, ok := eng.(engine.ModelLister); !ok || !slices.Equal(ml.Models(), []string{"llama", "qwen"}) {
		t.Fatalf("engine %T does not list the routed models", eng)
	}
	cfg.OpenAI.Routes[1].Model = "llama"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `openai.routes[1].model: "llama" is routed twice`) {
		t.Fatalf("validate: %v", err)
	}
}
