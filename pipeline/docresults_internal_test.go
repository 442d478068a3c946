package pipeline

import (
	"encoding/json"
	"testing"
)

// A plain OpenAI /v1/completions answer's logprobs (top_logprobs keyed by
// text, no ids, no bytes) reach results.json: per generated token its
// alternatives best first (equal logprobs in text order, so every build
// gives the same bytes), token_id null, bytes the text's UTF-8.
func TestDocResultOfOpenAICompletionsLogprobs(t *testing.T) {
	line := `{"id":"batch_req_1","custom_id":"c","response":{"status_code":200,"request_id":"r","body":{"object":"text_completion","choices":[{"index":0,"text":" Paris.","finish_reason":"stop",` +
		`"logprobs":{"tokens":[" Paris","."],"token_logprobs":[-0.04,-0.5],` +
		`"top_logprobs":[{" paris":-3.8," Paris":-0.04," Lyon":-4.1},{"!":-1.5,".":-0.5,"é":-1.5}],"text_offset":[0,6]}}],` +
		`"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}},"error":null}`
	r := docResultOf(1, []byte(line))
	got, err := json.Marshal(r.Logprobs)
	if err != nil {
		t.Fatal(err)
	}
	want := `[[{"token_id":null,"token":" Paris","bytes":[32,80,97,114,105,115],"logprob":-0.04},` +
		`{"token_id":null,"token":" paris","bytes":[32,112,97,114,105,115],"logprob":-3.8},` +
		`{"token_id":null,"token":" Lyon","bytes":[32,76,121,111,110],"logprob":-4.1}],` +
		`[{"token_id":null,"token":".","bytes":[46],"logprob":-0.5},` +
		`{"token_id":null,"token":"!","bytes":[33],"logprob":-1.5},` +
		`{"token_id":null,"token":"é","bytes":[195,169],"logprob":-1.5}]]`
	if string(got) != want {
		t.Fatalf("logprobs\n got %s\nwant %s", got, want)
	}
	if r.OutputText == nil || *r.OutputText != " Paris." || r.CustomID != "c" {
		t.Fatalf("entry %+v", r)
	}

	// Not asked (logprobs null): none; echo's null first entry: an empty list.
	for body, n := range map[string]int{
		`{"choices":[{"text":"a","finish_reason":"length","logprobs":null}]}`:                                                                                                -1,
		`{"choices":[{"text":"ab","finish_reason":"length","logprobs":{"tokens":["a","b"],"token_logprobs":[null,-1],"top_logprobs":[null,{"b":-1}],"text_offset":[0,1]}}]}`: 2,
	} {
		var r DocResult
		answerInto(&r, []byte(body))
		switch {
		case n < 0 && r.Logprobs != nil:
			t.Errorf("%s: logprobs %v, want none", body, r.Logprobs)
		case n >= 0 && (len(r.Logprobs) != n || len(r.Logprobs[0]) != 0 || len(r.Logprobs[1]) != 1 || r.Logprobs[1][0].Token != "b"):
			t.Errorf("%s: logprobs %+v", body, r.Logprobs)
		}
	}
}
