package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestResponsesToChatTranslatesInputAndFields(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"model":"m","input":"Hi"}`, `{"messages":[{"role":"user","content":"Hi"}],"model":"m"}`},
		{`{"input":"Hi","instructions":"Be brief.","max_output_tokens":16,"temperature":0.5,"top_p":0.9,"store":false,"text":{"format":{"type":"text"}},"top_k":4}`,
			`{"max_completion_tokens":16,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"temperature":0.5,"top_k":4,"top_p":0.9}`},
		{`{"input":[{"role":"developer","content":"Rules"},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},{"role":"assistant","content":[{"type":"output_text","text":"c","annotations":[]}]}]}`,
			`{"messages":[{"role":"developer","content":"Rules"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":[{"type":"text","text":"c"}]}]}`},
		{`{"input":"Hi","reasoning":{"effort":"none"},"previous_response_id":null,"tools":[]}`, `{"enable_thinking":false,"messages":[{"role":"user","content":"Hi"}]}`},
		{`{"input":"Hi","reasoning":{"effort":"high"}}`, `{"enable_thinking":true,"messages":[{"role":"user","content":"Hi"}]}`},
	} {
		got, inv := ResponsesToChat([]byte(c.in))
		if inv != nil {
			t.Errorf("%s: refused: %v", c.in, inv)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

func TestResponsesToChatRefusesByName(t *testing.T) {
	for _, c := range []struct{ in, param, code string }{
		{`{"input":"Hi","previous_response_id":"resp_1"}`, "previous_response_id", CodeUnsupportedParameter},
		{`{"input":"Hi","tools":[{"type":"function","name":"f"}]}`, "tools", CodeUnsupportedParameter},
		{`{"input":"Hi","background":true}`, "background", CodeUnsupportedParameter},
		{`{"input":"Hi","max_tokens":5}`, "max_tokens", CodeUnsupportedParameter},
		{`{"input":"Hi","store":true}`, "store", CodeUnsupportedValue},
		{`{"input":"Hi","text":{"format":{"type":"json_object"}}}`, "text.format.type", CodeUnsupportedValue},
		{`{"input":"Hi","text":{"format":{"type":"json_schema","name":"x","schema":{}}}}`, "text.format.type", CodeUnsupportedValue},
		{`{"input":"Hi","reasoning":{"effort":"low","summary":"auto"}}`, "reasoning.summary", CodeUnsupportedParameter},
		{`{"input":"Hi","reasoning":{"effort":"lots"}}`, "reasoning.effort", CodeInvalidValue},
		{`{"instructions":"x"}`, "input", CodeMissingRequiredParameter},
		{`{"input":5}`, "input", CodeInvalidType},
		{`{"input":[]}`, "input", CodeInvalidValue},
		{`{"input":[{"type":"function_call_output","call_id":"c","output":"o"}]}`, "input[0].call_id", CodeUnsupportedParameter},
		{`{"input":[{"type":"item_reference","id":"x"}]}`, "input[0].type", CodeUnsupportedValue},
		{`{"input":[{"role":"tool","content":"x"}]}`, "input[0].role", CodeInvalidValue},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"http://x/a.png"}]}]}`, "input[0].content[0]", CodeUnsupportedContent},
		{`{"input":[{"role":"user","content":[{"type":"input_text"}]}]}`, "input[0].content[0].text", CodeMissingRequiredParameter},
		{`{"input":"Hi","truncation":"auto"}`, "truncation", CodeUnsupportedValue},
	} {
		_, inv := ResponsesToChat([]byte(c.in))
		if inv == nil {
			t.Errorf("%s: accepted", c.in)
			continue
		}
		if inv.Param != c.param || inv.Code != c.code {
			t.Errorf("%s: refused %s (%s): %s; want %s (%s)", c.in, inv.Param, inv.Code, inv.Message, c.param, c.code)
		}
	}
}

func TestChatToResponse(t *testing.T) {
	req := `{"input":"Hi","instructions":"Be brief.","max_output_tokens":3,"temperature":0.5,"metadata":{"k":"v"}}`
	chat := `{"id":"chatcmpl-abc","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}}`
	b, err := ChatToResponse([]byte(req), []byte(chat))
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": "resp_abc", "object": "response", "created_at": 1700000000.0, "status": "incomplete",
		"model": "m", "instructions": "Be brief.", "max_output_tokens": 3.0, "temperature": 0.5, "top_p": nil, "store": false,
		"previous_response_id": nil, "error": nil}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("%s = %v, want %v", k, r[k], v)
		}
	}
	for _, s := range []string{
		`"incomplete_details":{"reason":"max_output_tokens"}`,
		`"output":[{"type":"message","id":"msg_abc","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"Hello there","annotations":[]}]}]`,
		`"usage":{"input_tokens":7,"input_tokens_details":{"cached_tokens":4},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":10}`,
		`"text":{"format":{"type":"text"}}`, `"metadata":{"k":"v"}`,
	} {
		if !strings.Contains(string(b), s) {
			t.Errorf("response lacks %s:\n%s", s, b)
		}
	}

	chat = strings.Replace(chat, `"length"`, `"stop"`, 1)
	chat = strings.Replace(chat, `"content":"Hello there"`, `"content":"Hi","reasoning_content":"think"`, 1)
	b, err = ChatToResponse([]byte(`{"input":"Hi"}`), []byte(chat))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"status":"completed"`, `"incomplete_details":null`, `"metadata":{}`,
		`{"type":"reasoning","id":"rs_abc","content":[{"type":"reasoning_text","text":"think"}],"summary":[]}`,
		`"content":[{"type":"output_text","text":"Hi","annotations":[]}]`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("response lacks %s:\n%s", s, b)
		}
	}
	if _, err := ChatToResponse([]byte(`{"input":"Hi"}`), []byte(`{"choices":[]}`)); err == nil {
		t.Error("a chat completion without a choice became a Response")
	}
}

func TestInProgressResponse(t *testing.T) {
	b, err := InProgressResponse([]byte(`{"model":"m","input":"Hi","instructions":"Be brief.","max_output_tokens":7,"metadata":{"k":"v"}}`), "resp_x", 42)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	out, ok := r["output"].([]any)
	if r["id"] != "resp_x" || r["created_at"] != 42.0 || r["status"] != "in_progress" || r["model"] != "m" ||
		r["instructions"] != "Be brief." || r["max_output_tokens"] != 7.0 || r["usage"] != nil || !ok || len(out) != 0 ||
		r["metadata"].(map[string]any)["k"] != "v" || r["object"] != "response" {
		t.Fatalf("%s", b)
	}
	if _, err := InProgressResponse([]byte(`[]`), "resp_x", 42); err == nil {
		t.Fatal("a body that is not an object was taken")
	}
}
