package pipeline_test

import (
	"path/filepath"
	"testing"
)

// custom_ids that hold half a UTF-16 surrogate pair ("\ud800", "\udfff")
// both decode to U+FFFD: kept, they would be one id (a false duplicate)
// and a result whose custom_id matches no input. Each is its own
// invalid_custom_id error line, with no custom_id, and runs nothing; in
// a JSONL input and in a requests document alike.
func TestLoneSurrogateCustomIDsAreInvalid(t *testing.T) {
	for _, c := range []struct{ format, content string }{
		{"jsonl", `{"custom_id":"\ud800","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}}
{"custom_id":"\udfff","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}}
{"custom_id":"ok","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}}
`},
		{"json", `{"url":"/v1/chat/completions","defaults":{"max_tokens":2},"requests":[
			{"custom_id":"\ud800","messages":[{"role":"user","content":"hi"}]},
			{"custom_id":"\udfff","messages":[{"role":"user","content":"hi"}]},
			{"custom_id":"ok","messages":[{"role":"user","content":"hi"}]}]}`},
	} {
		t.Run(c.format, func(t *testing.T) {
			e := newEnv(t)
			o := e.run(e.drop("sur", c.format, c.content, ""))
			if n := o.RequestCounts; n.Total != 3 || n.Completed != 1 || n.Failed != 2 {
				t.Fatalf("counts %+v", n)
			}
			errs := parseLines(t, filepath.Join(e.outbox, "sur.errors.jsonl"))
			if got := codes(errs); len(got) != 1 || got["invalid_custom_id"] != 2 {
				t.Fatalf("error codes %v, want two invalid_custom_id", got)
			}
			for _, l := range errs {
				if l.CustomID != nil {
					t.Errorf("line %d: error line custom_id %q, want null", l.Line, *l.CustomID)
				}
			}
			out := parseLines(t, filepath.Join(e.outbox, "sur.output.jsonl"))
			if len(out) != 1 || out[0].CustomID == nil || *out[0].CustomID != "ok" {
				t.Fatalf("results %+v, want only ok's", out)
			}
			if got := e.srv.Requests(); got != 1 {
				t.Fatalf("engine saw %d requests, want 1", got)
			}
			e.check("sur", c.format)
		})
	}
}
