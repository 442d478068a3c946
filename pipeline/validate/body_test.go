package validate

import (
	"strconv"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine"
)

// batchLine builds a batch line for url with body.
func batchLine(id, url, body string) string {
	return `{"custom_id":"` + id + `","method":"POST","url":"` + url + `","body":` + body + `}`
}

const (
	chatMsgs = `"messages":[{"role":"user","content":"hi"}]`
	chatOK   = `{` + chatMsgs + `,"max_tokens":16}`
)

// chat returns a valid chat body with extra members added.
func chat(extra string) string {
	if extra == "" {
		return chatOK
	}
	return `{` + chatMsgs + `,"max_tokens":16,` + extra + `}`
}

func comp(extra string) string {
	if extra == "" {
		return `{"prompt":"hi","max_tokens":16}`
	}
	return `{"prompt":"hi","max_tokens":16,` + extra + `}`
}

func emb(extra string) string {
	if extra == "" {
		return `{"input":"hi"}`
	}
	return `{"input":"hi",` + extra + `}`
}

func TestBodyRules(t *testing.T) {
	const (
		C = engine.EndpointChat
		P = engine.EndpointCompletions
		E = engine.EndpointEmbeddings
	)
	tests := []struct {
		name  string
		url   string
		body  string
		code  string // "" when valid
		param string
	}{
		// chat: messages
		{"chat ok", C, chatOK, "", ""},
		{"messages missing", C, `{"max_tokens":1}`, CodeMissingRequiredParameter, "messages"},
		{"messages not array", C, `{"messages":"hi","max_tokens":1}`, CodeInvalidType, "messages"},
		{"messages null", C, `{"messages":null,"max_tokens":1}`, CodeInvalidType, "messages"},
		{"messages empty", C, `{"messages":[],"max_tokens":1}`, CodeInvalidValue, "messages"},
		{"message not object", C, `{"messages":["hi"],"max_tokens":1}`, CodeInvalidType, "messages[0]"},
		{"role missing", C, `{"messages":[{"content":"hi"}],"max_tokens":1}`, CodeMissingRequiredParameter, "messages[0].role"},
		{"role not string", C, `{"messages":[{"role":1,"content":"hi"}],"max_tokens":1}`, CodeInvalidType, "messages[0].role"},
		{"role unknown", C, `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"bot","content":"hi"}],"max_tokens":1}`, CodeInvalidValue, "messages[2].role"},
		{"all roles", C, `{"messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"tool","content":"t","tool_call_id":"c1"},{"role":"function","name":"f","content":"r"}],"max_tokens":1}`, "", ""},
		{"content missing", C, `{"messages":[{"role":"user"}],"max_tokens":1}`, CodeMissingRequiredParameter, "messages[0].content"},
		{"content null user", C, `{"messages":[{"role":"user","content":null}],"max_tokens":1}`, CodeInvalidType, "messages[0].content"},
		{"content number", C, `{"messages":[{"role":"user","content":3}],"max_tokens":1}`, CodeInvalidType, "messages[0].content"},
		{"content empty string ok", C, `{"messages":[{"role":"user","content":""}],"max_tokens":1}`, "", ""},
		{"assistant null content with tool_calls", C, `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}],"max_tokens":1}`, "", ""},
		{"assistant absent content with function_call", C, `{"messages":[{"role":"assistant","function_call":{"name":"f","arguments":"{}"}}],"max_tokens":1}`, "", ""},
		{"assistant null content without calls", C, `{"messages":[{"role":"assistant","content":null}],"max_tokens":1}`, CodeInvalidType, "messages[0].content"},
		{"assistant absent content without calls", C, `{"messages":[{"role":"assistant"}],"max_tokens":1}`, CodeMissingRequiredParameter, "messages[0].content"},
		{"tool_calls not array", C, `{"messages":[{"role":"assistant","content":"x","tool_calls":{}}],"max_tokens":1}`, CodeInvalidType, "messages[0].tool_calls"},
		{"user null content with tool_calls", C, `{"messages":[{"role":"user","content":null,"tool_calls":[]}],"max_tokens":1}`, CodeInvalidType, "messages[0].content"},
		{"tool without tool_call_id", C, `{"messages":[{"role":"tool","content":"r"}],"max_tokens":1}`, CodeMissingRequiredParameter, "messages[0].tool_call_id"},
		{"tool_call_id not string", C, `{"messages":[{"role":"tool","content":"r","tool_call_id":5}],"max_tokens":1}`, CodeInvalidType, "messages[0].tool_call_id"},
		{"content parts ok", C, `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:"}}]}],"max_tokens":1}`, "", ""},
		{"content parts empty", C, `{"messages":[{"role":"user","content":[]}],"max_tokens":1}`, CodeInvalidValue, "messages[0].content"},
		{"content part not object", C, `{"messages":[{"role":"user","content":["a"]}],"max_tokens":1}`, CodeInvalidType, "messages[0].content[0]"},
		{"content part no type", C, `{"messages":[{"role":"user","content":[{"text":"a"}]}],"max_tokens":1}`, CodeMissingRequiredParameter, "messages[0].content[0].type"},
		{"content part type not string", C, `{"messages":[{"role":"user","content":[{"type":1}]}],"max_tokens":1}`, CodeInvalidType, "messages[0].content[0].type"},
		{"text part no text", C, `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text"}]}],"max_tokens":1}`, CodeMissingRequiredParameter, "messages[0].content[1].text"},
		{"text part text not string", C, `{"messages":[{"role":"user","content":[{"type":"text","text":["a"]}]}],"max_tokens":1}`, CodeInvalidType, "messages[0].content[0].text"},
		{"escaped role key", C, `{"messages":[{"r\u006fle":"user","content":"hi"}],"max_tokens":1}`, "", ""},
		{"role key case matters", C, `{"messages":[{"Role":"user","content":"hi"}],"max_tokens":1}`, CodeMissingRequiredParameter, "messages[0].role"},

		// completions: prompt
		{"prompt string", P, `{"prompt":"hi","max_tokens":1}`, "", ""},
		{"prompt empty string ok", P, `{"prompt":"","max_tokens":1}`, "", ""},
		{"prompt strings", P, `{"prompt":["a","b"],"max_tokens":1}`, "", ""},
		{"prompt tokens", P, `{"prompt":[1,2,3.0],"max_tokens":1}`, "", ""},
		{"prompt token arrays", P, `{"prompt":[[1,2],[3]],"max_tokens":1}`, "", ""},
		{"prompt missing", P, `{"max_tokens":1}`, CodeMissingRequiredParameter, "prompt"},
		{"prompt number", P, `{"prompt":5,"max_tokens":1}`, CodeInvalidType, "prompt"},
		{"prompt empty array", P, `{"prompt":[],"max_tokens":1}`, CodeInvalidValue, "prompt"},
		{"prompt mixed", P, `{"prompt":["a",1],"max_tokens":1}`, CodeInvalidType, "prompt[1]"},
		{"prompt array of objects", P, `{"prompt":[{}],"max_tokens":1}`, CodeInvalidType, "prompt[0]"},
		{"prompt negative token", P, `{"prompt":[1,-2],"max_tokens":1}`, CodeInvalidValue, "prompt[1]"},
		{"prompt fractional token", P, `{"prompt":[1.5],"max_tokens":1}`, CodeInvalidValue, "prompt[0]"},
		{"prompt empty inner array", P, `{"prompt":[[1],[]],"max_tokens":1}`, CodeInvalidValue, "prompt[1]"},
		{"prompt inner non-number", P, `{"prompt":[[1,"a"]],"max_tokens":1}`, CodeInvalidType, "prompt[0][1]"},
		{"messages ignored on completions", P, `{"prompt":"hi","messages":5,"max_tokens":1}`, "", ""},

		// embeddings: input, dimensions, encoding_format
		{"input ok", E, emb(""), "", ""},
		{"input strings", E, `{"input":["a","b"]}`, "", ""},
		{"input tokens", E, `{"input":[1,2]}`, "", ""},
		{"input token arrays", E, `{"input":[[1],[2,3]]}`, "", ""},
		{"input missing", E, `{"model":"m"}`, CodeMissingRequiredParameter, "input"},
		{"input empty string", E, `{"input":""}`, CodeInvalidValue, "input"},
		{"input empty element", E, `{"input":["a",""]}`, CodeInvalidValue, "input[1]"},
		{"input empty array", E, `{"input":[]}`, CodeInvalidValue, "input"},
		{"input object", E, `{"input":{}}`, CodeInvalidType, "input"},
		{"dimensions ok", E, emb(`"dimensions":256`), "", ""},
		{"dimensions zero", E, emb(`"dimensions":0`), CodeInvalidValue, "dimensions"},
		{"dimensions string", E, emb(`"dimensions":"256"`), CodeInvalidType, "dimensions"},
		{"encoding_format base64", E, emb(`"encoding_format":"base64"`), "", ""},
		{"encoding_format bad", E, emb(`"encoding_format":"int8"`), CodeInvalidValue, "encoding_format"},
		{"encoding_format not string", E, emb(`"encoding_format":1`), CodeInvalidType, "encoding_format"},
		{"embeddings need no max_tokens", E, `{"input":"x"}`, "", ""},
		{"sampling fields pass through embeddings", E, emb(`"temperature":9,"stream":true`), "", ""},

		// model
		{"model ok", C, chat(`"model":"m"`), "", ""},
		{"model not string", C, chat(`"model":1`), CodeInvalidType, "model"},

		// stream
		{"stream false", C, chat(`"stream":false`), "", ""},
		{"stream null", C, chat(`"stream":null`), "", ""},
		{"stream true", C, chat(`"stream":true`), CodeUnsupportedValue, "stream"},
		{"stream true completions", P, comp(`"stream":true`), CodeUnsupportedValue, "stream"},
		{"stream string", C, chat(`"stream":"no"`), CodeInvalidType, "stream"},

		// temperature [0,2]
		{"temperature 0", C, chat(`"temperature":0`), "", ""},
		{"temperature 2", C, chat(`"temperature":2`), "", ""},
		{"temperature null", C, chat(`"temperature":null`), "", ""},
		{"temperature high", C, chat(`"temperature":2.01`), CodeInvalidValue, "temperature"},
		{"temperature negative", P, comp(`"temperature":-0.1`), CodeInvalidValue, "temperature"},
		{"temperature string", C, chat(`"temperature":"1"`), CodeInvalidType, "temperature"},
		{"temperature huge", C, chat(`"temperature":1e999`), CodeInvalidValue, "temperature"},

		// top_p (0,1]
		{"top_p 1", C, chat(`"top_p":1`), "", ""},
		{"top_p 0", C, chat(`"top_p":0`), CodeInvalidValue, "top_p"},
		{"top_p 1.5", C, chat(`"top_p":1.5`), CodeInvalidValue, "top_p"},
		{"top_p bool", C, chat(`"top_p":true`), CodeInvalidType, "top_p"},

		// top_k integer >= -1
		{"top_k -1", C, chat(`"top_k":-1`), "", ""},
		{"top_k 0", C, chat(`"top_k":0`), "", ""},
		{"top_k 40.0", C, chat(`"top_k":40.0`), "", ""},
		{"top_k -2", C, chat(`"top_k":-2`), CodeInvalidValue, "top_k"},
		{"top_k 2.5", C, chat(`"top_k":2.5`), CodeInvalidType, "top_k"},
		{"top_k string", C, chat(`"top_k":"2"`), CodeInvalidType, "top_k"},

		// min_p [0,1]
		{"min_p 0", C, chat(`"min_p":0`), "", ""},
		{"min_p 1.1", C, chat(`"min_p":1.1`), CodeInvalidValue, "min_p"},

		// max_tokens, max_completion_tokens
		{"max_tokens 0", C, `{` + chatMsgs + `,"max_tokens":0}`, CodeInvalidValue, "max_tokens"},
		{"max_tokens 2.0", C, `{` + chatMsgs + `,"max_tokens":2.0}`, "", ""},
		{"max_tokens 2e1", C, `{` + chatMsgs + `,"max_tokens":2e1}`, "", ""},
		{"max_tokens 2.5", C, `{` + chatMsgs + `,"max_tokens":2.5}`, CodeInvalidType, "max_tokens"},
		{"max_tokens string", C, `{` + chatMsgs + `,"max_tokens":"2"}`, CodeInvalidType, "max_tokens"},
		{"max_tokens huge", C, `{` + chatMsgs + `,"max_tokens":99999999999999999999}`, CodeInvalidValue, "max_tokens"},
		{"max_completion_tokens negative", C, chat(`"max_completion_tokens":-1`), CodeInvalidValue, "max_completion_tokens"},
		{"max_completion_tokens alone", C, `{` + chatMsgs + `,"max_completion_tokens":5}`, "", ""},
		{"max_completion_tokens on completions", P, `{"prompt":"x","max_completion_tokens":5}`, "", ""},
		{"max_completion_tokens 0 on completions", P, `{"prompt":"x","max_completion_tokens":0}`, CodeInvalidValue, "max_completion_tokens"},
		{"no max tokens chat: until the context is full", C, `{` + chatMsgs + `}`, "", ""},
		{"max_tokens null is not set", C, `{` + chatMsgs + `,"max_tokens":null}`, "", ""},
		{"no max tokens completions", P, `{"prompt":"x"}`, "", ""},
		{"min_tokens without max_tokens", P, `{"prompt":"x","min_tokens":3}`, "", ""},

		// Fields of other formats and engines
		{"num_logprobs is the document's", C, chat(`"num_logprobs":3`), CodeUnsupportedParameter, "num_logprobs"},
		{"num_logprobs null too", P, comp(`"num_logprobs":null`), CodeUnsupportedParameter, "num_logprobs"},
		{"max_generate_length is the document's", C, `{` + chatMsgs + `,"max_generate_length":5}`, CodeUnsupportedParameter, "max_generate_length"},
		{"lora_name forwarded", C, chat(`"lora_name":"a"`), "", ""},
		{"lora_name string", C, chat(`"lora_name":1`), CodeInvalidType, "lora_name"},
		{"lora_path forwarded", C, chat(`"lora_name":"a","lora_path":"a/b"`), "", ""},
		{"lora_path string", C, chat(`"lora_name":"a","lora_path":1`), CodeInvalidType, "lora_path"},
		{"lora_path empty", C, chat(`"lora_name":"a","lora_path":""`), CodeInvalidValue, "lora_path"},
		{"lora_path needs lora_name", C, chat(`"lora_path":"a"`), CodeInvalidValue, "lora_path"},
		{"disable_spec_decode", C, chat(`"disable_spec_decode":true`), "", ""},
		{"speculative false", C, chat(`"speculative":false`), "", ""},
		{"speculative ngram", P, comp(`"speculative":"ngram"`), "", ""},
		{"speculative draft", C, chat(`"speculative":"draft"`), "", ""},
		{"speculative unknown method", C, chat(`"speculative":"eagle"`), CodeInvalidValue, "speculative"},
		{"speculative type", C, chat(`"speculative":1`), CodeInvalidType, "speculative"},
		{"speculative on embeddings is unknown there", E, `{"input":"x","speculative":1}`, "", ""},
		{"speculative on with disable_spec_decode", C, chat(`"speculative":true,"disable_spec_decode":true`), CodeInvalidValue, "disable_spec_decode"},
		{"speculative off with disable_spec_decode", C, chat(`"speculative":false,"disable_spec_decode":true`), "", ""},
		{"disable_spec_decode bool", P, comp(`"disable_spec_decode":1`), CodeInvalidType, "disable_spec_decode"},
		{"save_system_prompt_kv_cache", C, chat(`"save_system_prompt_kv_cache":false`), "", ""},
		{"save_system_prompt_kv_cache bool", C, chat(`"save_system_prompt_kv_cache":"y"`), CodeInvalidType, "save_system_prompt_kv_cache"},

		// Chat template controls
		{"apply_chat_template false", C, chat(`"apply_chat_template":false`), "", ""},
		{"apply_chat_template bool", C, chat(`"apply_chat_template":"no"`), CodeInvalidType, "apply_chat_template"},
		{"add_generation_prompt bool", C, chat(`"add_generation_prompt":0`), CodeInvalidType, "add_generation_prompt"},
		{"enable_thinking bool", C, chat(`"enable_thinking":null`), "", ""},
		{"enable_thinking string", C, chat(`"enable_thinking":"yes"`), CodeInvalidType, "enable_thinking"},
		{"chat_template_kwargs", C, chat(`"chat_template_kwargs":{"enable_thinking":false,"date_string":"1 Dec"}`), "", ""},
		{"chat_template_kwargs object", C, chat(`"chat_template_kwargs":[1]`), CodeInvalidType, "chat_template_kwargs"},
		{"chat_template_kwargs enable_thinking bool", C, chat(`"chat_template_kwargs":{"enable_thinking":1}`), CodeInvalidType, "chat_template_kwargs.enable_thinking"},
		{"chat_template_kwargs add_generation_prompt bool", C, chat(`"chat_template_kwargs":{"add_generation_prompt":"x"}`), CodeInvalidType, "chat_template_kwargs.add_generation_prompt"},

		// n 1..128
		{"n 128", C, chat(`"n":128`), "", ""},
		{"n 0", C, chat(`"n":0`), CodeInvalidValue, "n"},
		{"n 129", P, comp(`"n":129`), CodeInvalidValue, "n"},
		{"n 1.5", C, chat(`"n":1.5`), CodeInvalidType, "n"},

		// logprobs, top_logprobs
		{"chat logprobs true top 20", C, chat(`"logprobs":true,"top_logprobs":20`), "", ""},
		{"chat logprobs int", C, chat(`"logprobs":1`), CodeInvalidType, "logprobs"},
		{"chat top_logprobs 51", C, chat(`"logprobs":true,"top_logprobs":51`), CodeInvalidValue, "top_logprobs"},
		{"chat top_logprobs without logprobs", C, chat(`"top_logprobs":2`), CodeInvalidValue, "top_logprobs"},
		{"chat top_logprobs with logprobs false", C, chat(`"logprobs":false,"top_logprobs":0`), CodeInvalidValue, "top_logprobs"},
		{"chat top_logprobs string", C, chat(`"logprobs":true,"top_logprobs":"2"`), CodeInvalidType, "top_logprobs"},
		{"completions logprobs 5", P, comp(`"logprobs":5`), "", ""},
		{"completions logprobs 6", P, comp(`"logprobs":6`), CodeInvalidValue, "logprobs"},
		{"completions logprobs bool", P, comp(`"logprobs":true`), CodeInvalidType, "logprobs"},

		// logit_bias
		{"logit_bias ok", C, chat(`"logit_bias":{"50256":-100,"0":100,"7":0.5}`), "", ""},
		{"logit_bias not object", C, chat(`"logit_bias":[1]`), CodeInvalidType, "logit_bias"},
		{"logit_bias key not int", C, chat(`"logit_bias":{"abc":1}`), CodeInvalidValue, "logit_bias"},
		{"logit_bias key negative", C, chat(`"logit_bias":{"-1":1}`), CodeInvalidValue, "logit_bias"},
		{"logit_bias key empty", C, chat(`"logit_bias":{"":1}`), CodeInvalidValue, "logit_bias"},
		{"logit_bias value string", C, chat(`"logit_bias":{"1":"1"}`), CodeInvalidType, "logit_bias"},
		{"logit_bias value 101", P, comp(`"logit_bias":{"1":101}`), CodeInvalidValue, "logit_bias"},
		{"logit_bias value infinite", C, chat(`"logit_bias":{"1":-1e400}`), CodeInvalidValue, "logit_bias"},
		{"logit_bias 1024 entries", C, chat(`"logit_bias":` + logitBias(1024)), "", ""},
		{"logit_bias 1025 entries", C, chat(`"logit_bias":` + logitBias(1025)), CodeInvalidValue, "logit_bias"},

		// stop
		{"stop string", C, chat(`"stop":"\n"`), "", ""},
		{"stop null", C, chat(`"stop":null`), "", ""},
		{"stop 4", C, chat(`"stop":["a","b","c","d"]`), "", ""},
		{"stop 65", C, chat(`"stop":["s0","s1","s2","s3","s4","s5","s6","s7","s8","s9","s10","s11","s12","s13","s14","s15","s16","s17","s18","s19","s20","s21","s22","s23","s24","s25","s26","s27","s28","s29","s30","s31","s32","s33","s34","s35","s36","s37","s38","s39","s40","s41","s42","s43","s44","s45","s46","s47","s48","s49","s50","s51","s52","s53","s54","s55","s56","s57","s58","s59","s60","s61","s62","s63","s64"]`), CodeInvalidValue, "stop"},
		{"stop empty array", C, chat(`"stop":[]`), CodeInvalidValue, "stop"},
		{"stop number", P, comp(`"stop":1`), CodeInvalidType, "stop"},
		{"stop array of numbers", C, chat(`"stop":[1]`), CodeInvalidType, "stop"},

		// penalties
		{"presence_penalty -2", C, chat(`"presence_penalty":-2`), "", ""},
		{"presence_penalty 2.5", C, chat(`"presence_penalty":2.5`), CodeInvalidValue, "presence_penalty"},
		{"frequency_penalty -3", P, comp(`"frequency_penalty":-3`), CodeInvalidValue, "frequency_penalty"},
		{"frequency_penalty string", C, chat(`"frequency_penalty":"0"`), CodeInvalidType, "frequency_penalty"},
		{"repetition_penalty 1.1", C, chat(`"repetition_penalty":1.1`), "", ""},
		{"repetition_penalty 5", C, chat(`"repetition_penalty":5`), "", ""},
		{"repetition_penalty 0", C, chat(`"repetition_penalty":0`), CodeInvalidValue, "repetition_penalty"},

		// seed
		{"seed ok", C, chat(`"seed":-9223372036854775808`), "", ""},
		{"seed max", C, chat(`"seed":9223372036854775807`), "", ""},
		{"seed overflow", C, chat(`"seed":9223372036854775808`), CodeInvalidValue, "seed"},
		{"seed float", C, chat(`"seed":1.5`), CodeInvalidType, "seed"},
		{"seed string", C, chat(`"seed":"1"`), CodeInvalidType, "seed"},

		// min_tokens
		{"min_tokens ok", C, chat(`"min_tokens":16`), "", ""},
		{"min_tokens negative", C, chat(`"min_tokens":-1`), CodeInvalidValue, "min_tokens"},
		{"min_tokens above max_tokens", C, chat(`"min_tokens":17`), CodeInvalidValue, "min_tokens"},

		// unknown fields pass through; keys are matched exactly
		{"vllm extras", C, chat(`"ignore_eos":true,"guided_json":{"type":"object"},"skip_special_tokens":false`), "", ""},
		{"key case matters", C, chat(`"Temperature":99`), "", ""},
		{"escaped key is the key", C, chat(`"temp\u0065rature":99`), CodeInvalidValue, "temperature"},
		{"duplicate key last wins", C, chat(`"temperature":9,"temperature":1`), "", ""},
		{"duplicate key last wins bad", C, chat(`"temperature":1,"temperature":9`), CodeInvalidValue, "temperature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := NewChecker(Config{}).Check(1, []byte(batchLine("x", tt.url, tt.body)))
			assertOutcome(t, res, tt.code, tt.param)
			if res.Problem != nil && res.Problem.Code != CodeMissingMaxTokens && res.Problem.Kind != KindBadRequest {
				t.Errorf("kind = %v, want bad_request", res.Problem.Kind)
			}
		})
	}
}

func logitBias(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + strconv.Itoa(i) + `":1`)
	}
	b.WriteByte('}')
	return b.String()
}

// assertOutcome checks that res is valid (code "") or has the given problem.
func assertOutcome(t *testing.T, res Result, code, param string) {
	t.Helper()
	if (res.Request == nil) == (res.Problem == nil) {
		t.Fatalf("want exactly one of Request and Problem, got %+v", res)
	}
	if code == "" {
		if res.Problem != nil {
			t.Fatalf("want valid, got %s", res)
		}
		return
	}
	if res.Problem == nil {
		t.Fatalf("want %s (param %q), got valid", code, param)
	}
	if res.Problem.Code != code || res.Problem.Param != param {
		t.Fatalf("want %s (param %q), got %s (param %q): %s", code, param, res.Problem.Code, res.Problem.Param, res)
	}
}
