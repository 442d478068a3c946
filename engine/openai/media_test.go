package openai

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

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/wire"
)

// mediaRequest is a chat request whose user message holds a text part and
// part, in the requests document's shape.
func mediaRequest(customID, part string) *engine.Request {
	body := `{"model":"test-model","messages":[{"role":"user","content":[{"type":"text","text":"look"},` + part + `]}]}`
	return &engine.Request{CustomID: customID, Endpoint: engine.EndpointChat, Body: json.RawMessage(body)}
}

// captureServer starts a stand-in and returns a func listing the bodies of
// the requests it received, in order.
func captureServer(t *testing.T) (*openaitest.Server, func() [][]byte) {
	var mu sync.Mutex
	var bodies [][]byte
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, _ *http.Request, body []byte) openaitest.Fault {
		mu.Lock()
		bodies = append(bodies, bytes.Clone(body))
		mu.Unlock()
		return openaitest.Fault{}
	}})
	return srv, func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return bodies
	}
}

// sentPart decodes the second content part of the only message of body.
func sentPart(t *testing.T, body []byte) map[string]json.RawMessage {
	t.Helper()
	var b struct {
		Messages []struct {
			Content []map[string]json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &b); err != nil || len(b.Messages) != 1 || len(b.Messages[0].Content) != 2 {
		t.Fatalf("sent body %s: %v", body, err)
	}
	return b.Messages[0].Content[1]
}

func TestLocalMediaIsSentInline(t *testing.T) {
	root := t.TempDir()
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 100)...)
	wav := append([]byte("RIFF\x24\x00\x00\x00WAVE"), bytes.Repeat([]byte{3}, 64)...)
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"sub/cat.png": png, "clip.wav": wav, "noext": png} {
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink that stays inside media_root is followed.
	if err := os.Symlink(filepath.Join(root, "sub", "cat.png"), filepath.Join(root, "link.png")); err != nil {
		t.Fatal(err)
	}
	srv, bodies := captureServer(t)
	cfg := testConfig(srv.URL())
	cfg.MediaRoot = root
	e, _ := newTestEngine(t, cfg)

	type urlPart struct {
		URL string `json:"url"`
	}
	for _, tc := range []struct {
		part, typ string
		want      string
	}{
		{`{"type":"image","image":` + quote(filepath.Join(root, "sub", "cat.png")) + `}`, "image_url", "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)},
		{`{"type":"image","image":"sub/cat.png"}`, "image_url", "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)},
		{`{"type":"image","image":` + quote(filepath.Join(root, "link.png")) + `}`, "image_url", "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)},
		{`{"type":"image","image":"noext"}`, "image_url", "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)},
		{`{"type":"image","image":"https://example.com/cat.png"}`, "image_url", "https://example.com/cat.png"},
		{`{"type":"image","image":"data:image/png;base64,AAAA"}`, "image_url", "data:image/png;base64,AAAA"},
		{`{"type":"audio","audio":"https://example.com/a.mp3"}`, "audio_url", "https://example.com/a.mp3"},
	} {
		before := len(bodies())
		mustOK(t, e, mediaRequest("c", tc.part))
		got := bodies()
		if len(got) != before+1 {
			t.Fatalf("%s: %d bodies reached the server, want %d", tc.part, len(got), before+1)
		}
		p := sentPart(t, got[before])
		var typ string
		var u urlPart
		_ = json.Unmarshal(p["type"], &typ)
		_ = json.Unmarshal(p[tc.typ], &u)
		if typ != tc.typ || u.URL != tc.want {
			t.Errorf("%s: sent type %q url %.60q, want %q %.60q", tc.part, typ, u.URL, tc.typ, tc.want)
		}
	}

	// Audio: input_audio with the file's bytes and its format.
	before := len(bodies())
	mustOK(t, e, mediaRequest("a", `{"type":"audio","audio":"clip.wav"}`))
	p := sentPart(t, bodies()[before])
	var in struct{ Data, Format string }
	if err := json.Unmarshal(p["input_audio"], &in); err != nil || string(p["type"]) != `"input_audio"` {
		t.Fatalf("audio sent as %v (%v)", p, err)
	}
	if got, _ := base64.StdEncoding.DecodeString(in.Data); !bytes.Equal(got, wav) || in.Format != "wav" {
		t.Errorf("audio sent as %d bytes format %q, want the file's %d bytes, wav", len(got), in.Format, len(wav))
	}

	// OpenAI-shaped parts and text-only bodies reach the server byte for byte.
	for _, req := range []*engine.Request{
		mediaRequest("o", `{"type":"image_url","image_url":{"url":"https://example.com/x.png"}}`),
		chatRequest("t", "an image of a cat"),
	} {
		before := len(bodies())
		mustOK(t, e, req)
		if got := bodies()[before]; !bytes.Equal(got, req.Body) {
			t.Errorf("sent %s, want it unchanged: %s", got, req.Body)
		}
	}
}

func TestLocalMediaRefused(t *testing.T) {
	root := filepath.Join(t.TempDir(), "media")
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "dir.png"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(outside, "secret.png")
	if err := os.WriteFile(secret, []byte("\x89PNG\r\n\x1a\nsecret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(root, "escape.png")); err != nil {
		t.Fatal(err)
	}
	big, err := os.Create(filepath.Join(root, "big.png"))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(MaxMediaBytes + 1); err != nil {
		t.Fatal(err)
	}
	big.Close()
	if err := os.WriteFile(filepath.Join(root, "ok.png"), []byte("\x89PNG\r\n\x1a\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	srv, bodies := captureServer(t)
	cfg := testConfig(srv.URL())
	cfg.MediaRoot = root
	e, _ := newTestEngine(t, cfg)
	unset := testConfig(srv.URL()) // media_root unset
	eUnset, _ := newTestEngine(t, unset)

	for _, tc := range []struct {
		name string
		e    *Engine
		part string
		why  string
	}{
		{"outside", e, `{"type":"image","image":` + quote(secret) + `}`, "outside media_root"},
		{"dotdot", e, `{"type":"image","image":"../` + filepath.Base(outside) + `/secret.png"}`, ""},
		{"symlink out", e, `{"type":"image","image":"escape.png"}`, "outside media_root"},
		{"directory", e, `{"type":"image","image":"dir.png"}`, "not a regular file"},
		{"oversize", e, `{"type":"image","image":"big.png"}`, "over the limit"},
		{"missing", e, `{"type":"image","image":"nope.png"}`, "not found"},
		{"unset", eUnset, `{"type":"image","image":` + quote(filepath.Join(root, "ok.png")) + `}`, "media_root is not set"},
		{"video", e, `{"type":"video","video":"https://example.com/v.mp4"}`, "video"},
		{"audio format", e, `{"type":"audio","audio":"ok.png"}`, ".wav, .mp3 and .flac"},
		{"not a string", e, `{"type":"image","image":7}`, "non-empty string"},
	} {
		before := len(bodies())
		resp, err := do(t, tc.e, mediaRequest(tc.name, tc.part))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(bodies()) != before {
			t.Errorf("%s: the request reached the server", tc.name)
		}
		var eb wire.ErrorBody
		if resp.StatusCode != 400 || json.Unmarshal(resp.Body, &eb) != nil {
			t.Fatalf("%s: got %d %s, want a 400", tc.name, resp.StatusCode, resp.Body)
		}
		typ := "image"
		if strings.Contains(tc.part, `"video"`) {
			typ = "video"
		} else if strings.Contains(tc.part, `"audio"`) {
			typ = "audio"
		}
		wantParam := "messages[0].content[1]." + typ
		if eb.Error.Code == nil || *eb.Error.Code != wire.CodeUnsupportedContent || eb.Error.Param == nil || *eb.Error.Param != wantParam ||
			!strings.Contains(eb.Error.Message, wantParam) || !strings.Contains(eb.Error.Message, tc.why) {
			t.Errorf("%s: got %s, want code %s param %s and a message saying %q", tc.name, resp.Body, wire.CodeUnsupportedContent, wantParam, tc.why)
		}
		if bytes.Contains(resp.Body, []byte("secret")) && !strings.Contains(tc.part, "secret") {
			t.Errorf("%s: the answer leaks the file's content: %s", tc.name, resp.Body)
		}
	}
	// The engine still serves the next request.
	mustOK(t, e, mediaRequest("after", `{"type":"image","image":"ok.png"}`))
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A body with lora_path (a requests document's available_lora_weights) is
// refused, never forwarded: the server would ignore the path or read it on
// its own disk.
func TestLoraPathRefused(t *testing.T) {
	srv, bodies := captureServer(t)
	e, _ := newTestEngine(t, testConfig(srv.URL()))
	body := `{"model":"test-model","lora_name":"ft","lora_path":"/adapters/ft","messages":[{"role":"user","content":"hi"}]}`
	resp, err := do(t, e, &engine.Request{CustomID: "lora", Endpoint: engine.EndpointChat, Body: json.RawMessage(body)})
	if err != nil {
		t.Fatal(err)
	}
	var eb wire.ErrorBody
	if resp.StatusCode != 400 || json.Unmarshal(resp.Body, &eb) != nil {
		t.Fatalf("got %d %s, want a 400", resp.StatusCode, resp.Body)
	}
	if eb.Error.Code == nil || *eb.Error.Code != wire.CodeUnsupportedParameter || eb.Error.Param == nil || *eb.Error.Param != "lora_path" ||
		!strings.Contains(eb.Error.Message, "--lora-modules") || !strings.Contains(eb.Error.Message, "model") {
		t.Errorf("error %+v", eb.Error)
	}
	if resp.RequestID == "" {
		t.Error("no request_id")
	}
	if n := len(bodies()); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
	// lora_name alone is forwarded (a server may know the name).
	resp, err = do(t, e, &engine.Request{CustomID: "name", Endpoint: engine.EndpointChat,
		Body: json.RawMessage(`{"model":"test-model","lora_name":"ft","messages":[{"role":"user","content":"hi"}]}`)})
	if err != nil || resp.StatusCode != 200 || len(bodies()) != 1 {
		t.Fatalf("lora_name alone: %v %v, %d sent", err, resp, len(bodies()))
	}
}
