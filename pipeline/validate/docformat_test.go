package validate

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// docBodies reads doc through a DocReader and returns each request's body,
// decoded.
func docBodies(t *testing.T, doc string) []map[string]any {
	t.Helper()
	d := NewDocReader(strings.NewReader(doc), 0)
	var out []map[string]any
	for {
		_, raw, tooLong, err := d.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil || tooLong {
			t.Fatalf("Next() = %v, %v", tooLong, err)
		}
		var line struct {
			Body map[string]any `json:"body"`
		}
		if err := json.Unmarshal(raw, &line); err != nil {
			t.Fatalf("line %s: %v", raw, err)
		}
		out = append(out, line.Body)
	}
}

// TestDocReaderFormatKeys covers each key of TensorRT Edge-LLM's input JSON
// format, and each of its defaults, as the body fields they become.
func TestDocReaderFormatKeys(t *testing.T) {
	user := `"messages":[{"role":"user","content":"hi"}]`
	defaults := map[string]any{
		"max_tokens": 256.0, "temperature": 1.0, "top_p": 0.8, "top_k": 50.0,
		"chat_template_kwargs": map[string]any{"enable_thinking": false},
	}
	with := func(kv ...any) map[string]any {
		m := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}}
		for k, v := range defaults {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
				continue
			}
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name string
		top  string // top-level keys before requests, with a trailing comma
		req  string // the request's own keys after messages, with a leading comma
		want map[string]any
	}{
		{"defaults", ``, ``, with()},
		{"batch_size has no effect", `"batch_size":8,`, ``, with()},
		{"temperature", `"temperature":0,`, ``, with("temperature", 0.0)},
		{"top_p", `"top_p":0.5,`, ``, with("top_p", 0.5)},
		{"top_k", `"top_k":1,`, ``, with("top_k", 1.0)},
		{"max_generate_length", `"max_generate_length":7,`, ``, with("max_tokens", 7.0)},
		{"request max_generate_length", ``, `,"max_generate_length":3`, with("max_tokens", 3.0)},
		{"logit_bias", `"logit_bias":{"123":-100.0},`, ``, with("logit_bias", map[string]any{"123": -100.0})},
		{"request logit_bias replaces the top-level map", `"logit_bias":{"123":-100.0},`, `,"logit_bias":{"456":5.0}`, with("logit_bias", map[string]any{"456": 5.0})},
		{"num_logprobs", `"num_logprobs":5,`, ``, with("logprobs", true, "top_logprobs", 5.0)},
		{"num_logprobs 50", `"num_logprobs":50,`, ``, with("logprobs", true, "top_logprobs", 50.0)},
		{"num_logprobs 0", `"num_logprobs":0,`, ``, with()},
		{"request num_logprobs", ``, `,"num_logprobs":3`, with("logprobs", true, "top_logprobs", 3.0)},
		{"request num_logprobs 0 turns the default off", `"num_logprobs":5,`, `,"num_logprobs":0`, with("logprobs", false)},
		{"request num_logprobs raises the default", `"num_logprobs":2,`, `,"num_logprobs":9`, with("logprobs", true, "top_logprobs", 9.0)},
		{"apply_chat_template false", `"apply_chat_template":false,`, ``, with("apply_chat_template", false)},
		{"apply_chat_template true is the plain meaning", `"apply_chat_template":true,`, ``, with()},
		{"add_generation_prompt false", `"add_generation_prompt":false,`, ``, with("add_generation_prompt", false)},
		{"add_generation_prompt true", `"add_generation_prompt":true,`, ``, with()},
		{"enable_thinking", `"enable_thinking":true,`, ``, with("chat_template_kwargs", map[string]any{"enable_thinking": true})},
		{"request chat_template_kwargs keep the document's enable_thinking", `"enable_thinking":true,`, `,"chat_template_kwargs":{"x":1}`, with("chat_template_kwargs", map[string]any{"x": 1.0, "enable_thinking": true})},
		{"request chat_template_kwargs enable_thinking wins", `"enable_thinking":true,`, `,"chat_template_kwargs":{"enable_thinking":false}`, with("chat_template_kwargs", map[string]any{"enable_thinking": false})},
		{"request enable_thinking wins", ``, `,"enable_thinking":true`, with("enable_thinking", true, "chat_template_kwargs", map[string]any{"enable_thinking": true})},
		{"request enable_thinking false wins", `"enable_thinking":true,`, `,"enable_thinking":false`, with("enable_thinking", false, "chat_template_kwargs", map[string]any{"enable_thinking": false})},
		{"request enable_thinking goes into its chat_template_kwargs", ``, `,"enable_thinking":true,"chat_template_kwargs":{"x":1}`, with("enable_thinking", true, "chat_template_kwargs", map[string]any{"x": 1.0, "enable_thinking": true})},
		{"available_lora_weights", `"available_lora_weights":{"french":"/a/f.safetensors"},`, ``, with()},
		{"lora_name is forwarded to be refused", ``, `,"lora_name":"french"`, with("lora_name", "french")},
		{"empty lora_name is no adapter", ``, `,"lora_name":""`, with()},
		{"lora_name of available_lora_weights gets its path", `"available_lora_weights":{"french":"adapters/f.safetensors","de":"/a/de"},`, `,"lora_name":"french"`,
			with("lora_name", "french", "lora_path", "adapters/f.safetensors")},
		{"lora_name not in available_lora_weights goes alone", `"available_lora_weights":{"french":"/a/f"},`, `,"lora_name":"ft"`, with("lora_name", "ft")},
		{"a request's own lora_path is kept", `"available_lora_weights":{"french":"/a/f"},`, `,"lora_name":"french","lora_path":"/b"`, with("lora_name", "french", "lora_path", "/b")},
		{"save_system_prompt_kv_cache", `"save_system_prompt_kv_cache":true,`, `,"save_system_prompt_kv_cache":true`, with()},
		{"disable_spec_decode true turns speculation off for the request", ``, `,"disable_spec_decode":true`, with("disable_spec_decode", true)},
		{"disable_spec_decode false is the default", ``, `,"disable_spec_decode":false`, with()},
		{"stop string", ``, `,"stop":"###"`, with("stop", "###")},
		{"stop array of many", ``, `,"stop":["1","2","3","4","5","6"]`, with("stop", []any{"1", "2", "3", "4", "5", "6"})},
		{"request fields win", `"temperature":0.5,"max_generate_length":9,`, `,"temperature":0.2,"max_tokens":4`, with("temperature", 0.2, "max_tokens", 4.0)},
		{"defaults key", `"defaults":{"seed":1},`, ``, with("seed", 1.0)},
		{"defaults key overrides the format's defaults", `"defaults":{"temperature":0},`, ``, with("temperature", 0.0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := `{` + tt.top + `"requests":[{` + user + tt.req + `}]}`
			got := docBodies(t, doc)
			if len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
				t.Fatalf("%s:\ngot  %v\nwant %v", doc, got, tt.want)
			}
		})
	}
}

// TestDocReaderFormatDefaultsByEndpoint: completions get the sampling,
// length and logprobs defaults but no chat-template controls; embeddings get
// none.
func TestDocReaderFormatDefaultsByEndpoint(t *testing.T) {
	got := docBodies(t, `{"num_logprobs":2,"enable_thinking":true,"requests":[{"prompt":"a"},{"input":"b"}]}`)
	want := []map[string]any{
		{"prompt": "a", "max_tokens": 256.0, "temperature": 1.0, "top_p": 0.8, "top_k": 50.0, "logprobs": 2.0},
		{"input": "b"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestDocReaderFormatErrors(t *testing.T) {
	tests := []struct{ doc, want string }{
		{`{"num_logprobs":51,"requests":[]}`, `"num_logprobs" must be an integer between 0 and 50, got 51`},
		{`{"num_logprobs":-1,"requests":[]}`, `"num_logprobs" must be an integer between 0 and 50, got -1`},
		{`{"num_logprobs":"5","requests":[]}`, `"num_logprobs" must be an integer between 0 and 50, got "5"`},
		{`{"batch_size":0,"requests":[]}`, `"batch_size" must be a positive integer, got 0`},
		{`{"temperature":3,"requests":[]}`, `"temperature": must be between 0 and 2`},
		{`{"top_p":0,"requests":[]}`, `"top_p": must be greater than 0 and at most 1`},
		{`{"top_k":"x","requests":[]}`, `"top_k": must be an integer`},
		{`{"max_generate_length":-1,"requests":[]}`, `"max_generate_length": must be`},
		{`{"logit_bias":{"1":101},"requests":[]}`, `"logit_bias": `},
		{`{"logit_bias":{"1":1e400},"requests":[]}`, `"logit_bias": `},
		{`{"logit_bias":` + logitBias(1025) + `,"requests":[]}`, `"logit_bias": `},
		{`{"apply_chat_template":1,"requests":[]}`, `"apply_chat_template" must be a boolean, got a number`},
		{`{"add_generation_prompt":"no","requests":[]}`, `"add_generation_prompt" must be a boolean, got a string`},
		{`{"enable_thinking":null,"enable_thinking":true,"requests":[]}`, `repeated key "enable_thinking"`},
		{`{"available_lora_weights":["a"],"requests":[]}`, `"available_lora_weights" must be an object mapping adapter names to paths, got an array`},
		{`{"available_lora_weights":{"a":""},"requests":[]}`, `"available_lora_weights"."a" must be a non-empty string, the adapter's path, got ""`},
		{`{"available_lora_weights":{"a":"x","b":7},"requests":[]}`, `"available_lora_weights"."b" must be a non-empty string, the adapter's path, got 7`},
		{`{"available_lora_weights":{"":"x"},"requests":[]}`, `"available_lora_weights": an adapter has an empty name`},
		{`{"temperature":0,"defaults":{"temperature":1},"requests":[]}`, `"temperature" is set both at the top level and in "defaults": keep one`},
		{`{"max_generate_length":2,"defaults":{"max_tokens":1},"requests":[]}`, `"max_tokens" is set both at the top level and in "defaults": keep one`},
		{`{"requests":[],"top_k":1}`, `"top_k" must come before "requests"`},
	}
	for _, tt := range tests {
		_, err := drain(t, NewDocReader(strings.NewReader(tt.doc), 0))
		var de *DocError
		if err == nil || !errors.As(err, &de) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.80s: error %v, want one containing %q", tt.doc, err, tt.want)
		}
	}
	// A bias map of 1024 ids is the most allowed.
	if _, err := drain(t, NewDocReader(strings.NewReader(`{"logit_bias":`+logitBias(1024)+`,"requests":[]}`), 0)); err != nil {
		t.Errorf("1024 biases: %v", err)
	}
}

// The example documents of TensorRT Edge-LLM's input JSON format
// documentation, verbatim.
var formatExamples = map[string]string{
	"basic structure": `{
    "batch_size": 1,
    "temperature": 1.0,
    "top_p": 0.8,
    "top_k": 50,
    "logit_bias": {"123": -100.0},
    "max_generate_length": 256,
    "num_logprobs": 0,
    "apply_chat_template": true,
    "enable_thinking": false,
    "available_lora_weights": {},
    "requests": [
        {
            "messages": [
                {
                    "role": "user",
                    "content": "Your message here"
                }
            ],
            "lora_name": "optional_lora_name",
            "save_system_prompt_kv_cache": false,
            "disable_spec_decode": false,
            "logit_bias": {"456": 5.0},
            "num_logprobs": 0,
            "stop": ["optional_stop_string"]
        }
    ]
}`,
	"basic text": `{
    "batch_size": 1,
    "max_generate_length": 256,
    "requests": [
        {
            "messages": [
                {"role": "user", "content": "What is machine learning?"}
            ]
        }
    ]
}`,
	"multi-turn": `{
    "requests": [
        {
            "messages": [
                {"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": "The capital of France is Paris."},
                {"role": "user", "content": "What is the population?"}
            ]
        }
    ]
}`,
	"multimodal": `{
    "requests": [
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": "/path/to/image.jpg"},
                        {"type": "text", "text": "Describe this image."}
                    ]
                }
            ]
        }
    ]
}`,
	"lora": `{
    "available_lora_weights": {
        "french": "/path/to/french_adapter.safetensors"
    },
    "requests": [
        {
            "messages": [
                {"role": "user", "content": "Translate to French."}
            ],
            "lora_name": "french"
        }
    ]
}`,
	"system prompt kv cache": `{
    "requests": [
        {
            "messages": [
                {"role": "system", "content": "Long system prompt..."},
                {"role": "user", "content": "Question?"}
            ],
            "save_system_prompt_kv_cache": true
        }
    ]
}`,
	"raw format": `{
    "apply_chat_template": false,
    "requests": [
        {
            "messages": [
                {"role": "user", "content": "Raw text without special tokens"}
            ]
        }
    ]
}`,
	"disable spec decode": `{
    "requests": [
        {
            "messages": [
                {"role": "user", "content": "Your question here"}
            ],
            "disable_spec_decode": true
        }
    ]
}`,
	"logit bias": `{
    "logit_bias": {"123": -100.0},
    "requests": [
        {
            "messages": [
                {"role": "user", "content": "Avoid token 123 by default."}
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "Prefer token 456 for this request."}
            ],
            "logit_bias": {"456": 5.0}
        }
    ]
}`,
	"top-n logprobs": `{
    "num_logprobs": 5,
    "max_generate_length": 64,
    "requests": [
        {
            "messages": [
                {"role": "user", "content": "The capital of France is"}
            ]
        }
    ]
}`,
	"stop strings": `{
    "requests": [
        {
            "messages": [
                {"role": "user", "content": "Write a short answer ending before '###'."}
            ],
            "stop": ["###", "\n\nUser:"]
        }
    ]
}`,
}

// TestDocReaderFormatExamples reads every example of the format's
// documentation and checks each request as the daemon would.
func TestDocReaderFormatExamples(t *testing.T) {
	for name, doc := range formatExamples {
		t.Run(name, func(t *testing.T) {
			d := NewDocReader(strings.NewReader(doc), 0)
			c := NewChecker(Config{})
			for {
				n, raw, _, err := d.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				res := c.Check(n, raw)
				if res.Problem != nil {
					t.Errorf("request %d: %s\n%s", n, res.String(), raw)
				}
			}
		})
	}
}

// A full batch line's body gets the lora_path of its lora_name too; an
// embeddings body never does (adapters serve generation only).
func TestDocReaderLoraPathInFullLines(t *testing.T) {
	got := docBodies(t, `{"available_lora_weights":{"fr":"fr.safetensors"},"requests":[`+
		`{"custom_id":"a","url":"/v1/completions","body":{"prompt":"x","lora_name":"fr"}},`+
		`{"custom_id":"b","url":"/v1/embeddings","body":{"input":"x","lora_name":"fr"}}]}`)
	if len(got) != 2 || got[0]["lora_path"] != "fr.safetensors" || got[1]["lora_path"] != nil {
		t.Fatalf("bodies %v", got)
	}
}
