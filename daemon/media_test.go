package daemon_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// A requests document's image and audio parts naming files under
// media_root reach the remote engine inline; a file outside it and a video
// part fail their own request with a line naming the part, and the rest of
// the batch runs.
func TestDocumentMediaReachesRemoteEngine(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	e := newEnv(t, openaitest.Options{Fault: func(_ int64, _ *http.Request, body []byte) openaitest.Fault {
		mu.Lock()
		bodies = append(bodies, bytes.Clone(body))
		mu.Unlock()
		return openaitest.Fault{}
	}})
	media, outside := t.TempDir(), t.TempDir()
	jpg := append([]byte{0xff, 0xd8, 0xff, 0xe0}, bytes.Repeat([]byte("img"), 50)...)
	flac := append([]byte("fLaC"), bytes.Repeat([]byte("snd"), 50)...)
	write := func(path string, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(media, "cat.jpg"), jpg)
	write(filepath.Join(media, "clip.flac"), flac)
	write(filepath.Join(outside, "secret.jpg"), jpg)

	cfg := e.config()
	cfg.MediaRoot = media
	e.open(cfg)
	part := func(typ, loc string) string {
		p, _ := json.Marshal(map[string]string{"type": typ, typ: loc})
		return `{"messages":[{"role":"user","content":[` + string(p) + `,{"type":"text","text":"describe"}]}]}`
	}
	e.drop("media.json", `{"max_generate_length":8,"requests":[`+strings.Join([]string{
		part("image", filepath.Join(media, "cat.jpg")),
		part("audio", "clip.flac"),
		part("image", filepath.Join(outside, "secret.jpg")),
		part("video", "clip.mp4"),
	}, ",")+`]}`)
	o := e.waitEnded("media", "json")
	if o.RequestCounts.Completed != 2 || o.RequestCounts.Failed != 2 {
		t.Fatalf("request counts %+v, want 2 completed, 2 failed", o.RequestCounts)
	}
	e.check("media", "json")

	mu.Lock()
	sent := bytes.Join(bodies, []byte("\n"))
	mu.Unlock()
	if want := `"url":"data:image/jpeg;base64,` + base64.StdEncoding.EncodeToString(jpg) + `"`; !bytes.Contains(sent, []byte(want)) {
		t.Errorf("the image did not reach the server as a data URL; sent:\n%.400s", sent)
	}
	if want := `"data":"` + base64.StdEncoding.EncodeToString(flac) + `","format":"flac"`; !bytes.Contains(sent, []byte(want)) {
		t.Errorf("the audio did not reach the server as input_audio; sent:\n%.400s", sent)
	}
	if bytes.Contains(sent, []byte("secret")) || bytes.Contains(sent, []byte("video")) {
		t.Errorf("a refused request reached the server:\n%.400s", sent)
	}

	errs := strings.Join(e.lines("media.errors.jsonl"), "\n")
	for _, want := range []string{
		`"custom_id":"request-3"`, `messages[0].content[0].image`, "outside media_root",
		`"custom_id":"request-4"`, `messages[0].content[0].video`, `"code":"unsupported_content"`,
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("errors file lacks %q:\n%s", want, errs)
		}
	}
}

// media_root is refused by name where it cannot be honoured.
func TestValidateMediaRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		engine, root, want string
	}{
		{"native", dir, "media_root: the native engine is text only"},
		{"openai", "media", "media_root: must be an absolute path"},
		{"openai", filepath.Join(dir, "nope"), "media_root: "},
		{"openai", file, "is not a directory"},
		{"openai", dir, ""},
		{"openai", "", ""},
	} {
		cfg := daemon.DefaultConfig()
		cfg.Engine, cfg.MediaRoot = tc.engine, tc.root
		if tc.engine == "native" {
			cfg.Native.Models = nil
		}
		err := cfg.Validate()
		switch {
		case tc.want == "" && err != nil && strings.Contains(err.Error(), "media_root"):
			t.Errorf("%s %q: %v", tc.engine, tc.root, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %q: error %v, want one with %q", tc.engine, tc.root, err, tc.want)
		}
	}
}
