package native

import (
	"encoding/json"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// The native engine is text only: every media part, in the document's
// shape or OpenAI's, is a 400 unsupported_content naming the part.
func TestParseRequestRefusesMediaParts(t *testing.T) {
	for _, tc := range []struct{ part, param string }{
		{`{"type":"image","image":"/data/cat.png"}`, "messages[1].content[1]"},
		{`{"type":"audio","audio":"/data/a.wav"}`, "messages[1].content[1]"},
		{`{"type":"video","video":"/data/v.mp4"}`, "messages[1].content[1]"},
		{`{"type":"image_url","image_url":{"url":"https://x/cat.png"}}`, "messages[1].content[1]"},
		{`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}`, "messages[1].content[1]"},
	} {
		body := `{"model":"m","max_tokens":4,"messages":[{"role":"system","content":"s"},` +
			`{"role":"user","content":[{"type":"text","text":"look"},` + tc.part + `]}]}`
		_, resp := parseRequest(&engine.Request{Endpoint: engine.EndpointChat, Body: json.RawMessage(body)})
		if resp == nil || resp.StatusCode != 400 {
			t.Fatalf("%s: got %+v, want a 400", tc.part, resp)
		}
		var e wire.ErrorBody
		if err := json.Unmarshal(resp.Body, &e); err != nil {
			t.Fatal(err)
		}
		if e.Error.Code == nil || *e.Error.Code != wire.CodeUnsupportedContent || e.Error.Param == nil || *e.Error.Param != tc.param {
			t.Errorf("%s: got %s, want code %s param %s", tc.part, resp.Body, wire.CodeUnsupportedContent, tc.param)
		}
	}
	// Text parts alone still run.
	body := `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`
	if _, resp := parseRequest(&engine.Request{Endpoint: engine.EndpointChat, Body: json.RawMessage(body)}); resp != nil {
		t.Fatalf("text parts refused: %s", resp.Body)
	}
}
