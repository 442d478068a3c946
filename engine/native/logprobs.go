package native

import (
	"math"
	"strings"
	"unicode/utf8"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/wire"
)

// Logprobs are the model's raw distribution: log_softmax of the logits as
// the model produced them, before logit_bias, penalties, the min_tokens
// mask, temperature and the filters (vLLM's default, "raw_logprobs").

// idLogprob is a token and its logprob.
type idLogprob struct {
	id      int32
	logprob float64
}

// tokenLogprob is what one output token reports.
type tokenLogprob struct {
	id      int32
	logprob float64
	top     []idLogprob // the request's top alternatives, best first
	// end is the byte length of the output text right after this token's
	// text was written; complete says all of the token's bytes were in it
	// (not held back as the start of an unfinished character).
	end      int
	complete bool
}

// logSumExp is log Σ e^x, in float64.
func logSumExp(cpu *kernels.CPU, x []float32) float64 {
	m := float64(x[cpu.Argmax(x)])
	kernels.AfterSIMD()
	if math.IsInf(m, 0) || math.IsNaN(m) {
		return m
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s)
}

// noteToken keeps the logprobs of tok, which advance just appended to s,
// piece being the text the decoder gave for it.
func (r *runner) noteToken(s *seq, tok int32, piece string) {
	st := s.samp
	if st == nil || st.pendingAt >= len(st.pending) || st.pending[st.pendingAt].id != tok {
		return
	}
	e := st.pending[st.pendingAt]
	st.pendingAt++
	e.end = s.text.Len()
	e.complete = strings.HasSuffix(piece, string(r.tok.TokenBytes(tok)))
	st.lp = append(st.lp, e)
}

// cutLogprobs keeps the logprobs of the tokens whose text lies wholly in
// the first n bytes of the output: a stop string was cut there, and neither
// it nor anything after it may show through a token's text.
func cutLogprobs(s *seq, n int) {
	st := s.samp
	if st == nil {
		return
	}
	for i, e := range st.lp {
		if e.end > n || (e.end == n && !e.complete) {
			st.lp = st.lp[:i]
			return
		}
	}
}

// finite stands in vLLM's -9999 for a token the model rules out: JSON has
// no infinities.
func finite(v float64) float64 {
	if math.IsInf(v, -1) || math.IsNaN(v) || v < -9999 {
		return -9999
	}
	return v
}

// tokenBytes is a token's bytes as JSON numbers (never null).
func tokenBytes(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// chatLogprobs builds s's choices[i].logprobs; nil (JSON null) when the
// request did not ask.
func (r *runner) chatLogprobs(p *params, s *seq) any {
	if !p.logprobs {
		return nil
	}
	out := wire.ChatLogprobs{Content: []wire.ChatTokenLogprob{}}
	if s.samp == nil {
		return out
	}
	for _, e := range s.samp.lp {
		b := r.tok.TokenBytes(e.id)
		c := wire.ChatTokenLogprob{TokenID: &e.id, Token: string(b), Logprob: finite(e.logprob), Bytes: tokenBytes(b), TopLogprobs: []wire.ChatTopLogprob{}}
		for _, t := range e.top {
			tb := r.tok.TokenBytes(t.id)
			c.TopLogprobs = append(c.TopLogprobs, wire.ChatTopLogprob{TokenID: &t.id, Token: string(tb), Logprob: finite(t.logprob), Bytes: tokenBytes(tb)})
		}
		out.Content = append(out.Content, c)
	}
	return out
}

// legacyLogprobs builds s's choices[i].logprobs for /v1/completions: text
// is the choice's text, which starts with prompt when it is echoed.
// text_offset counts characters (Unicode code points) into text, as Python
// indexes it; token_ids and top_tokens carry the ids and exact bytes, as
// chat's logprobs do. Nil when the request did not ask.
func (r *runner) legacyLogprobs(p *params, s *seq, text, prompt string) any {
	if !p.logprobs {
		return nil
	}
	prefixRunes, prefixBytes := utf8.RuneCountInString(prompt), len(prompt)
	out := wire.TextLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []wire.TopByText{}, TextOffset: []int{},
		TokenIDs: []int32{}, TopTokens: [][]wire.ChatTopLogprob{}}
	if s.samp == nil {
		return out
	}
	at, runes := prefixBytes, prefixRunes // a byte offset in text and its character count
	start := 0                            // where the next token's text starts in the output
	for _, e := range s.samp.lp {
		tok := string(r.tok.TokenBytes(e.id))
		lp := finite(e.logprob)
		off := min(prefixBytes+start, len(text))
		if off > at {
			runes += utf8.RuneCountInString(text[at:off])
			at = off
		}
		top := make(wire.TopByText, 0, len(e.top)+1)
		byID := make([]wire.ChatTopLogprob, 0, len(e.top))
		chosenIn := false
		for _, t := range e.top {
			tb := r.tok.TokenBytes(t.id)
			top = append(top, wire.TextLogprob{Text: string(tb), Logprob: finite(t.logprob)})
			byID = append(byID, wire.ChatTopLogprob{TokenID: &t.id, Token: string(tb), Logprob: finite(t.logprob), Bytes: tokenBytes(tb)})
			chosenIn = chosenIn || t.id == e.id
		}
		if !chosenIn {
			// The sampled token is always reported, as OpenAI and vLLM do.
			top = insertByLogprob(top, wire.TextLogprob{Text: tok, Logprob: lp})
		}
		out.Tokens = append(out.Tokens, tok)
		out.TokenLogprobs = append(out.TokenLogprobs, lp)
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, runes)
		out.TokenIDs = append(out.TokenIDs, e.id)
		out.TopTokens = append(out.TopTokens, byID)
		start = e.end
	}
	return out
}

// insertByLogprob inserts e keeping t sorted best first.
func insertByLogprob(t wire.TopByText, e wire.TextLogprob) wire.TopByText {
	i := len(t)
	for i > 0 && t[i-1].Logprob < e.Logprob {
		i--
	}
	t = append(t, wire.TextLogprob{})
	copy(t[i+1:], t[i:])
	t[i] = e
	return t
}
