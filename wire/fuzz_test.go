package wire

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzTranslations: whatever a /v1/responses or /v1/messages body holds,
// its translation to chat is a JSON object with a messages array, or a
// refusal naming a parameter with a message; whatever the engine's chat
// answer, its translation back is a JSON object or an error. Never a
// panic, and the inputs are left as they were.
func FuzzTranslations(f *testing.F) {
	for _, s := range []struct{ req, answer string }{
		{`{"input":"hi","instructions":"s","max_output_tokens":4,"reasoning":{"effort":"none"},"store":false,"text":{"format":{"type":"text"}}}`,
			`{"id":"chatcmpl-1","created":1,"model":"m","choices":[{"message":{"content":"yo","reasoning_content":"r"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`},
		{`{"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"x"}]}],"truncation":"auto"}`, `{"choices":[]}`},
		{`{"max_tokens":4,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":"b"}],"stop_sequences":["z"]}`,
			`{"id":"c","model":"m","choices":[{"message":{"content":"a z"},"finish_reason":"stop","stop_reason":"z"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`},
		{`{"messages":[{"role":"user","content":"a"}],"tools":[{"name":"t"}]}`, `null`},
		{`[]`, `{`}, {`{"input":null}`, `{"choices":[{"message":{"content":null}}]}`},
	} {
		f.Add([]byte(s.req), []byte(s.answer))
	}
	f.Fuzz(func(t *testing.T, req, answer []byte) {
		origReq, origAnswer := bytes.Clone(req), bytes.Clone(answer)
		for name, translate := range map[string]func([]byte) ([]byte, *Invalid){"responses": ResponsesToChat, "messages": MessagesToChat} {
			chat, inv := translate(req)
			if inv != nil {
				if inv.Param == "" || inv.Message == "" || inv.Code == "" {
					t.Fatalf("%s: a refusal without param, code or message: %+v", name, inv)
				}
				continue
			}
			var c struct {
				Messages []json.RawMessage `json:"messages"`
			}
			if err := json.Unmarshal(chat, &c); err != nil || c.Messages == nil {
				t.Fatalf("%s: translated %q to %q, not a chat body with messages (%v)", name, req, chat, err)
			}
		}
		for name, back := range map[string]func() ([]byte, error){
			"response": func() ([]byte, error) { return ChatToResponse(req, answer) },
			"message":  func() ([]byte, error) { return ChatToMessage(answer) },
		} {
			out, err := back()
			if err != nil {
				continue
			}
			var m map[string]json.RawMessage
			if json.Unmarshal(out, &m) != nil || m == nil {
				t.Fatalf("%s: answer %q became %q, not a JSON object", name, answer, out)
			}
		}
		if !bytes.Equal(req, origReq) || !bytes.Equal(answer, origAnswer) {
			t.Fatal("a translation modified its input")
		}
	})
}
