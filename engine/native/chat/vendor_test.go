package chat

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// vendorTemplate returns the chat template llama.cpp keeps for a model
// (models/templates/NAME.jinja in the llama.cpp source node-llama-cpp ships
// as a git bundle), or skips when BATCHD_LLAMACPP does not name an install
// (.ci/run makes one on x86-64). The vendors' templates stay out of this
// repository; the tests read them where they are published.
func vendorTemplate(t *testing.T, name string) string {
	t.Helper()
	nlc := os.Getenv("BATCHD_LLAMACPP")
	if nlc == "" {
		t.Skip("BATCHD_LLAMACPP is unset: set it to a directory where `npm install node-llama-cpp@3.21.1` ran to render the vendors' chat templates")
	}
	bundle := filepath.Join(nlc, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle")
	repo := filepath.Join(t.TempDir(), "llama.cpp.git")
	if out, err := exec.Command("git", "clone", "-q", "--bare", bundle, repo).CombinedOutput(); err != nil {
		t.Fatalf("git clone %s: %v\n%s", bundle, err, out)
	}
	src, err := exec.Command("git", "-C", repo, "show", "HEAD:models/templates/"+name+".jinja").Output()
	if err != nil {
		t.Fatalf("llama.cpp's models/templates/%s.jinja: %v", name, err)
	}
	return string(src)
}

// TestVendorTemplates: gpt-oss's harmony template (tools as a TypeScript
// namespace, reasoning effort, a tool call on the commentary channel and
// its result), GLM-4.6's (tools as JSON, thinking off, a tool call as
// XML-ish argument pairs, its result as an observation) and Phi-3.5's render through the Jinja engine as the
// templates define them.
func TestVendorTemplates(t *testing.T) {
	tools := json.RawMessage(`[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`)
	t.Run("gpt-oss", func(t *testing.T) {
		tm, err := Parse(vendorTemplate(t, "openai-gpt-oss-120b"))
		if err != nil {
			t.Fatal(err)
		}
		opts := Options{AddGenerationPrompt: true, Extra: map[string]any{"reasoning_effort": "low"}}
		out := render(t, tm, `[{"role":"system","content":"Be brief."},{"role":"user","content":"What is the weather?"},
			{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
			{"role":"tool","content":"sunny"}]`, string(tools), opts)
		for _, want := range []string{
			"<|start|>system<|message|>", "Reasoning: low",
			"<|start|>developer<|message|># Instructions\n\nBe brief.",
			"namespace functions {\n\n// Weather\ntype get_weather = (_: {\ncity: string,\n}) => any;\n\n} // namespace functions<|end|>",
			"<|start|>user<|message|>What is the weather?<|end|>",
			`<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>`,
			"<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("harmony prompt lacks %q:\n%s", want, out)
			}
		}
		if !strings.HasSuffix(out, "<|end|><|start|>assistant") {
			t.Errorf("harmony prompt does not end by opening the assistant's turn:\n%s", out)
		}
	})
	t.Run("glm-4.6", func(t *testing.T) {
		tm, err := Parse(vendorTemplate(t, "GLM-4.6"))
		if err != nil {
			t.Fatal(err)
		}
		out := render(t, tm, `[{"role":"system","content":"Be brief."},{"role":"user","content":"What is the weather?"},
			{"role":"assistant","content":"<think>Ask the tool.</think>","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
			{"role":"tool","content":"sunny"}]`, string(tools), Options{AddGenerationPrompt: true, Extra: map[string]any{"enable_thinking": false}})
		for _, want := range []string{
			"[gMASK]<sop><|system|>\n# Tools", `{"type": "function", "function": {"name": "get_weather"`,
			"<|system|>\nBe brief.<|user|>\nWhat is the weather?/nothink<|assistant|>\n<think>Ask the tool.</think>",
			"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
			"<|observation|>\n<tool_response>\nsunny\n</tool_response>",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("GLM prompt lacks %q:\n%s", want, out)
			}
		}
		if !strings.HasSuffix(out, "<|assistant|>\n<think></think>") {
			t.Errorf("GLM prompt does not end by opening the assistant's turn without thinking:\n%s", out)
		}
	})
	t.Run("phi-3.5", func(t *testing.T) {
		tm, err := Parse(vendorTemplate(t, "microsoft-Phi-3.5-mini-instruct"))
		if err != nil {
			t.Fatal(err)
		}
		out := render(t, tm, `[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"Bye"}]`, "",
			Options{AddGenerationPrompt: true})
		if want := "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n"; out != want {
			t.Errorf("got %q\nwant %q", out, want)
		}
	})
}
