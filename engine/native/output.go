package native

import (
	"strings"
	"unicode/utf8"
)

// The output step: postprocess hands each token advance appended to
// output, which turns it into text and applies the stop strings, then has
// emit stream what of the text is decided.

// output turns tok, the token advance just appended to s, into text. It
// ends s ("stop") at a stop string ending in the new text once
// min_tokens are out (vLLM's rule), cutting the text and its logprobs
// where the stop string starts; else, when advance ended s by length, it
// adds what the decoder still holds.
func (sc *scheduler) output(s *seq, tok int32) {
	p := s.job.p
	old := s.text.Len()
	piece := s.dec.Next(tok)
	s.text.WriteString(piece)
	if sc.onToken != nil {
		sc.onToken(s, tok, piece)
	}
	// Only a match ending in the new text can be new.
	if len(p.stop) > 0 && len(s.tokens)-s.promptLen > p.minTokens {
		if i := findStop(s.text.String(), old, p.stop); i >= 0 {
			text := s.text.String()
			s.stopStr = stopAt(text, i, p.stop)
			s.text.Reset()
			s.text.WriteString(text[:i])
			cutLogprobs(s, i)
			s.end("stop") // before the length advance may have reached
			return
		}
	}
	if s.finished() {
		s.text.WriteString(s.dec.Flush())
	}
}

// emit streams the text of s decided since the last call: all of it once s
// has finished, else all but what could still turn out to be the start of
// a stop string.
func (s *seq) emit() {
	if s.job.stream == nil {
		return
	}
	text := s.text.String()
	upto := len(text)
	if !s.finished() {
		hold := 0
		for _, st := range s.job.p.stop {
			hold = max(hold, len(st)-1)
		}
		upto = max(s.streamed, len(text)-hold)
		for upto > s.streamed && upto < len(text) && !utf8.RuneStart(text[upto]) {
			upto--
		}
	}
	if upto > s.streamed {
		s.job.stream(s.index, text[s.streamed:upto])
		s.streamed = upto
	}
}

// stopAt returns the stop string of stops that matches text at i (the
// earliest match findStop found; of strings matching there, the first
// listed).
func stopAt(text string, i int, stops []string) *string {
	for _, st := range stops {
		if st != "" && strings.HasPrefix(text[i:], st) {
			return &st
		}
	}
	return nil
}
