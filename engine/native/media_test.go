package native

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/pipeline/validate"
	"github.com/batchd/batchd/wire"
)

// The native engine is text only: every media part, in the document's
// shape or OpenAI's, is a 400 unsupported_content naming the part, and
// `batchd validate --model` (validate.CheckNative) reports the same code
// and param for the same line offline.
func TestParseRequestRefusesMediaParts(t *testing.T) {
	for _, tc := range []struct{ messages, param string }{
		{`[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","image":"/data/cat.png"}]}]`, "messages[1].content[1]"},
		{`[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"look"},{"type":"audio","audio":"/data/a.wav"}]}]`, "messages[1].content[1]"},
		{`[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"look"},{"type":"video","video":"/data/v.mp4"}]}]`, "messages[1].content[1]"},
		{`[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://x/cat.png"}}]}]`, "messages[1].content[1]"},
		{`[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"look"},{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]`, "messages[1].content[1]"},
		{`[{"role":"user","content":[{"type":"image","image":"a.png"},{"type":"text","text":"what?"}]}]`, "messages[0].content[0]"},
		{`[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":[{"type":"text","text":"c"},{"type":"text","text":"d"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]`, "messages[2].content[2]"},
	} {
		body := `{"model":"m","max_tokens":4,"messages":` + tc.messages + `}`
		_, resp := parseRequest(&engine.Request{Endpoint: engine.EndpointChat, Body: json.RawMessage(body)})
		if resp == nil || resp.StatusCode != 400 {
			t.Fatalf("%s: got %+v, want a 400", tc.messages, resp)
		}
		var e wire.ErrorBody
		if err := json.Unmarshal(resp.Body, &e); err != nil {
			t.Fatal(err)
		}
		if e.Error.Code == nil || *e.Error.Code != wire.CodeUnsupportedContent || e.Error.Param == nil || *e.Error.Param != tc.param {
			t.Errorf("%s: got %s, want code %s param %s", tc.messages, resp.Body, wire.CodeUnsupportedContent, tc.param)
			continue
		}

		// The same line, offline.
		line := `{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":` + body + `}`
		res := validate.NewChecker(validate.Config{}).Check(1, []byte(line))
		if res.Problem != nil {
			t.Errorf("%s: the validator refuses it before the native rules: %v", tc.messages, res.Problem)
			continue
		}
		p := validate.CheckNative(res.Request)
		if p == nil || p.Code != *e.Error.Code || p.Param != *e.Error.Param || p.Error() != e.Error.Message {
			t.Errorf("%s: validate --model says %+v; the engine says %s", tc.messages, p, resp.Body)
		}
	}
	// Text parts alone still run, and validate agrees.
	for i, messages := range []string{
		`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`,
		`[{"role":"user","content":"a"}]`,
	} {
		body := `{"model":"m","max_tokens":4,"messages":` + messages + `}`
		if _, resp := parseRequest(&engine.Request{Endpoint: engine.EndpointChat, Body: json.RawMessage(body)}); resp != nil {
			t.Fatalf("text parts refused: %s", resp.Body)
		}
		line := `{"custom_id":"t` + strconv.Itoa(i) + `","method":"POST","url":"/v1/chat/completions","body":` + body + `}`
		res := validate.NewChecker(validate.Config{}).Check(1, []byte(line))
		if res.Problem != nil {
			t.Errorf("%s: validate refuses text parts: %v", messages, res.Problem)
		} else if p := validate.CheckNative(res.Request); p != nil {
			t.Errorf("%s: validate --model refuses text parts: %v", messages, p)
		}
	}
}
