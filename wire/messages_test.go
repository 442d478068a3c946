package wire

import (
	"strings"
	"testing"
)

func TestMessagesToChat(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"model":"claude","max_tokens":64,"system":"Be brief.","messages":[{"role":"user","content":"Hi"}],"stop_sequences":["\n\n"],"temperature":0.5,"top_p":0.9,"top_k":40,"metadata":{"user_id":"u"},"stream":false}`,
			`{"model":"claude","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":64,"stop":["\n\n"],"temperature":0.5,"top_p":0.9,"top_k":40}`},
		{`{"max_tokens":8,"system":[{"type":"text","text":"A"},{"type":"text","text":"B","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]},{"role":"assistant","content":"z"}],"stop_sequences":[]}`,
			`{"messages":[{"role":"system","content":"A\n\nB"},{"role":"user","content":"x\n\ny"},{"role":"assistant","content":"z"}],"max_tokens":8}`},
		{`{"max_tokens":8,"messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]}],"max_tokens":8}`},
	} {
		got, inv := MessagesToChat([]byte(c.in))
		if inv != nil || string(got) != c.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", c.in, got, inv, c.want)
		}
	}
}

// What a Messages body asks for that batchd does not honour is refused by
// name, never dropped.
func TestMessagesToChatRefusesByName(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"Hi"}]`
	for _, c := range []struct{ in, param, code, text string }{
		{`{` + msgs + `}`, "max_tokens", CodeMissingRequiredParameter, "required"},
		{`{"max_tokens":5,` + msgs + `,"tools":[]}`, "tools", CodeUnsupportedParameter, "tools are not supported"},
		{`{"max_tokens":5,` + msgs + `,"tool_choice":{"type":"auto"}}`, "tool_choice", CodeUnsupportedParameter, "tools"},
		{`{"max_tokens":5,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":1024}}`, "thinking", CodeUnsupportedParameter, "thinking"},
		{`{"max_tokens":5,` + msgs + `,"stream":true}`, "stream", CodeUnsupportedParameter, "streaming"},
		{`{"max_tokens":5,` + msgs + `,"n":2}`, "n", CodeUnsupportedParameter, "not a field of /v1/messages"},
		{`{"max_tokens":5,"messages":[]}`, "messages", CodeInvalidType, "non-empty"},
		{`{"max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, "messages[0].role", CodeInvalidValue, `"user" or "assistant"`},
		{`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}`, "messages[0].content[0].type", CodeUnsupportedContent, `"tool_result"`},
		{`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}`, "messages[0].content[0].source", CodeUnsupportedValue, "base64"},
		{`{"max_tokens":5,"system":[{"type":"image"}],` + msgs + `}`, "system[0].type", CodeUnsupportedContent, `"text"`},
		{`{"max_tokens":5,"stop_sequences":"END",` + msgs + `}`, "stop_sequences", CodeInvalidType, "array of strings"},
	} {
		_, inv := MessagesToChat([]byte(c.in))
		if inv == nil || inv.Param != c.param || inv.Code != c.code || !strings.Contains(inv.Message, c.text) {
			t.Errorf("%s: %+v, want param %s code %s with %q", c.in, inv, c.param, c.code, c.text)
		}
	}
}

func TestChatToMessage(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"id":"chatcmpl-abc","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`,
			`{"id":"msg_abc","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":2}}`},
		{`{"id":"x","model":"m","choices":[{"message":{"content":"Hel"},"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":8}}}`,
			`{"id":"msg_x","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hel"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":1,"cache_read_input_tokens":8}}`},
		{`{"id":"y","model":"m","choices":[{"message":{"content":""},"finish_reason":"stop","stop_reason":"END"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`,
			`{"id":"msg_y","type":"message","role":"assistant","model":"m","content":[],"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":3,"output_tokens":1}}`},
	} {
		got, err := ChatToMessage([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{`{"choices":[]}`, `[1]`, `{"choices":`} {
		if got, err := ChatToMessage([]byte(bad)); err == nil {
			t.Errorf("%s: %s, want an error", bad, got)
		}
	}
}
