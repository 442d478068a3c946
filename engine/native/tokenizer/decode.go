package tokenizer

import "unicode/utf8"

// DecodeOpts changes what Decode and a Decoder write.
type DecodeOpts struct {
	// Special writes control tokens (BOS, EOS, <|im_start|>, …) as their
	// text; by default they are skipped.
	Special bool
}

// Decode turns ids into text: valid UTF-8, with each byte that is not part of
// a valid sequence written as U+FFFD. Control tokens are skipped; ids outside
// the vocabulary are ignored. For a SentencePiece ("llama") vocabulary the
// space that encoding put before the text is removed from the first piece
// that has text (so a leading BOS does not matter), as SentencePiece and
// llama.cpp do.
func (t *Tokenizer) Decode(ids []int32) string { return t.DecodeWith(ids, DecodeOpts{}) }

// DecodeWith is Decode with options.
func (t *Tokenizer) DecodeWith(ids []int32, opts DecodeOpts) string {
	st := t.newDecodeState(opts)
	buf := make([]byte, 0, len(ids)*4)
	for _, id := range ids {
		buf = st.appendPiece(buf, id)
	}
	if utf8.Valid(buf) {
		return string(buf)
	}
	return string(appendLossy(nil, buf))
}

// decodeState is what Decode and Decoder share: which tokens to write and
// whether the leading space is still to be removed.
type decodeState struct {
	t       *Tokenizer
	special bool
	lstrip  bool
}

func (t *Tokenizer) newDecodeState(opts DecodeOpts) decodeState {
	return decodeState{t: t, special: opts.Special, lstrip: t.kind == kindSPM && t.spacePrefix}
}

// piece is what id writes (nil for nothing).
func (st *decodeState) piece(id int32) []byte {
	t := st.t
	if id < 0 || int(id) >= len(t.tokens) {
		return nil
	}
	switch t.types[id] {
	case TypeControl:
		if !st.special {
			return nil
		}
	case TypeUnused:
		return nil
	}
	p := t.pieceData[t.pieceOff[id]:t.pieceOff[id+1]]
	if st.lstrip && len(p) > 0 {
		st.lstrip = false
		if p[0] == ' ' {
			p = p[1:]
		}
	}
	return p
}

func (st *decodeState) appendPiece(dst []byte, id int32) []byte { return append(dst, st.piece(id)...) }

// appendLossy appends src with each byte that does not start a valid UTF-8
// sequence replaced by U+FFFD.
func appendLossy(dst, src []byte) []byte {
	for len(src) > 0 {
		r, w := utf8.DecodeRune(src)
		if r == utf8.RuneError && w == 1 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, src[:w]...)
		}
		src = src[w:]
	}
	return dst
}

// Decoder turns a stream of ids into text piece by piece, never splitting a
// UTF-8 character: bytes of a character that is not complete yet are held
// until the token that completes it. The concatenation of everything Next
// and Flush return equals Decode of the same ids. Not safe for concurrent
// use; make one per stream.
type Decoder struct {
	st      decodeState
	pending []byte // the start of a character not yet complete
	out     []byte
}

// NewDecoder starts a stream at the beginning of the text (as Decode does).
// To continue after a prompt whose text the caller already has, call Prime.
func (t *Tokenizer) NewDecoder() *Decoder { return t.NewDecoderWith(DecodeOpts{}) }

// NewDecoderWith is NewDecoder with options.
func (t *Tokenizer) NewDecoderWith(opts DecodeOpts) *Decoder {
	return &Decoder{st: t.newDecodeState(opts)}
}

// Prime feeds ids whose text is not wanted, typically the prompt of a
// generation: afterwards Next returns what Decode(prompt+generated) adds to
// Decode(prompt). For a "llama" vocabulary this matters: without it, a
// space starting the first generated token would be taken for the leading
// space SentencePiece strips. An incomplete character at the end of the
// primed ids is kept, so the token that completes it is written whole.
func (d *Decoder) Prime(ids []int32) {
	for _, id := range ids {
		d.pending = append(d.pending, d.st.piece(id)...)
		d.pending = d.pending[d.completePrefix(d.pending):]
	}
	d.pending = append([]byte(nil), d.pending...)
}

// completePrefix is the length of the longest prefix of p that does not end
// inside a character that could still be completed.
func (d *Decoder) completePrefix(p []byte) int {
	i := 0
	for i < len(p) {
		if !utf8.FullRune(p[i:]) {
			break // a valid start of a character, not complete yet
		}
		_, w := utf8.DecodeRune(p[i:])
		i += w
	}
	return i
}

// Next returns the text completed by id ("" while a character is incomplete
// or for a token that writes nothing).
func (d *Decoder) Next(id int32) string {
	p := d.st.piece(id)
	if len(p) == 0 {
		return ""
	}
	if len(d.pending) == 0 && utf8.Valid(p) {
		return string(p) // the common case
	}
	d.pending = append(d.pending, p...)
	n := d.completePrefix(d.pending)
	d.out = appendLossy(d.out[:0], d.pending[:n])
	rest := copy(d.pending, d.pending[n:])
	d.pending = d.pending[:rest]
	return string(d.out)
}

// Flush returns the held bytes of an incomplete character, each as U+FFFD,
// and forgets them. The stream can go on afterwards.
func (d *Decoder) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	s := string(appendLossy(nil, d.pending))
	d.pending = d.pending[:0]
	return s
}
