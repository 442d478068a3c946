package native

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// The engine refuses a body outside wire's limits with the very 400 the
// pipeline's validator writes for it (both check with wire's rules).
func TestParseRequestRefusesWithWireRules(t *testing.T) {
	for _, c := range []struct {
		endpoint, body string
		want           *wire.Invalid
	}{
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"n":129}`, wire.N.Check(129)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":0}`, wire.MaxTokens.Check(0)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"temperature":2.5}`, wire.Temperature.Check(2.5)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"top_p":0}`, wire.TopP.Check(0)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"top_k":-2}`, wire.TopK.Check(-2)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"min_p":1.5}`, wire.MinP.Check(1.5)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"repetition_penalty":0}`, wire.RepetitionPenalty.Check(0)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"stop":["s0","s1","s2","s3","s4","s5","s6","s7","s8","s9","s10","s11","s12","s13","s14","s15","s16","s17","s18","s19","s20","s21","s22","s23","s24","s25","s26","s27","s28","s29","s30","s31","s32","s33","s34","s35","s36","s37","s38","s39","s40","s41","s42","s43","s44","s45","s46","s47","s48","s49","s50","s51","s52","s53","s54","s55","s56","s57","s58","s59","s60","s61","s62","s63","s64"]}`, wire.CheckStopCount(65)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"logprobs":6}`, wire.CompletionsLogprobs.Check(6)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"min_tokens":3}`, wire.CheckMinTokens(3, 2)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"logit_bias":{"5":101}}`, wire.CheckLogitBias("5", 101)},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"logit_bias":{"5":1e999}}`, wire.CheckLogitBias("5", math.Inf(1))},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"logit_bias":{"x":1}}`, func() *wire.Invalid { _, e := wire.LogitBiasKey("x"); return e }()},
		{engine.EndpointChat, `{"messages":[{"role":"user","content":"a"}],"max_tokens":2,"top_logprobs":2}`, wire.TopLogprobsWithoutLogprobs()},
		{engine.EndpointChat, `{"messages":[{"role":"user","content":"a"}],"max_tokens":2,"logprobs":true,"top_logprobs":51}`, wire.TopLogprobs.Check(51)},
	} {
		if c.want == nil {
			t.Fatalf("%s: the rule accepts the value", c.body)
		}
		_, resp := parseRequest(&engine.Request{Endpoint: c.endpoint, Body: json.RawMessage(c.body)})
		if resp == nil || resp.StatusCode != 400 || string(resp.Body) != string(c.want.Body()) {
			t.Errorf("%s: got %+v, want 400 %s", c.body, resp, c.want.Body())
		}
	}
	// Integers written as integral numbers pass, as in the validator.
	if _, resp := parseRequest(&engine.Request{Endpoint: engine.EndpointCompletions,
		Body: json.RawMessage(`{"prompt":"a","max_tokens":2.0,"logprobs":5.0,"n":1e2}`)}); resp != nil {
		t.Errorf("integral numbers refused: %s", resp.Body)
	}
}
