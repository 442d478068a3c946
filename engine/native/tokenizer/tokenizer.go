package tokenizer

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Token types, as GGUF stores them in tokenizer.ggml.token_type.
const (
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3 // BOS, EOS, <|im_start|>…: matched in text only with parseSpecial, hidden by Decode
	TypeUserDefined int32 = 4 // added tokens that are plain text: always matched in text, always decoded
	TypeUnused      int32 = 5
	TypeByte        int32 = 6 // SentencePiece byte fallback <0xNN>
)

var (
	// ErrInvalidSpec: the vocabulary is inconsistent (lengths, ids out of range, bad merges).
	ErrInvalidSpec = errors.New("tokenizer: invalid spec")
	// ErrUnsupported: a model type, pre-tokenizer or tokenizer.json component this package does not implement.
	ErrUnsupported = errors.New("tokenizer: unsupported")
)

// Spec describes a vocabulary as GGUF stores it (tokenizer.ggml.*).
type Spec struct {
	// Model is tokenizer.ggml.model: "llama" (SentencePiece-style BPE with
	// scores and byte fallback) or "gpt2" (byte-level BPE).
	Model string
	// Pre is tokenizer.ggml.pre; it selects the pre-tokenizer of a "gpt2"
	// model ("qwen2", "llama-bpe", "smollm", "default", "gpt-2", …; "" means
	// "default", as in llama.cpp). Ignored for "llama".
	Pre    string
	Tokens []string
	Scores []float32 // nil: all zero
	Types  []int32   // Type* constants; nil: inferred (byte tokens by their <0xNN> text, BOS/EOS control)
	Merges []string  // "left right", by rank; "gpt2" only

	BOS, EOS, UNK, PAD int // -1 when absent
	AddBOS, AddEOS     bool

	// NoSpacePrefix turns off the "▁" a "llama" tokenizer puts before text
	// (GGUF tokenizer.ggml.add_space_prefix = false). Ignored for "gpt2".
	NoSpacePrefix bool
	// ExtraEOG adds end-of-generation ids beyond EOS and the well-known
	// end-of-turn tokens (GGUF tokenizer.ggml.eot_token_id, eom_token_id).
	ExtraEOG []int32
}

type modelKind uint8

const (
	kindSPM modelKind = iota + 1
	kindBPE
)

// Tokenizer encodes text to token ids and decodes ids to text. It is
// immutable after New/FromHF and safe for concurrent use.
type Tokenizer struct {
	kind   modelKind
	tokens []string
	types  []int32
	scores []float32
	textID map[string]int32 // token text (as stored) → first id with it

	bos, eos, unk, pad int32
	addBOS, addEOS     bool
	eog                []bool

	// pieceData[pieceOff[i]:pieceOff[i+1]] are the bytes token i stands for
	// (control and unused tokens: their text).
	pieceData []byte
	pieceOff  []uint32

	specials specialMatcher

	// SentencePiece.
	spacePrefix bool
	byteTok     [256]int32 // id of <0xNN>, -1 if missing

	// Byte-level BPE.
	bpe *bpeModel
}

// eogTexts are tokens that end a turn in common chat formats; llama.cpp
// treats them as end of generation when a vocabulary has them.
var eogTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>",
	"<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
}

// New builds a tokenizer from a GGUF-style vocabulary. It does no I/O.
func New(spec Spec) (*Tokenizer, error) {
	n := len(spec.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrInvalidSpec)
	}
	if n > 1<<30 {
		return nil, fmt.Errorf("%w: %d tokens", ErrInvalidSpec, n)
	}
	if spec.Scores != nil && len(spec.Scores) != n {
		return nil, fmt.Errorf("%w: %d scores for %d tokens", ErrInvalidSpec, len(spec.Scores), n)
	}
	if spec.Types != nil && len(spec.Types) != n {
		return nil, fmt.Errorf("%w: %d token types for %d tokens", ErrInvalidSpec, len(spec.Types), n)
	}
	for _, f := range []struct {
		name string
		id   int
	}{{"BOS", spec.BOS}, {"EOS", spec.EOS}, {"UNK", spec.UNK}, {"PAD", spec.PAD}} {
		if f.id < -1 || f.id >= n {
			return nil, fmt.Errorf("%w: %s id %d outside vocabulary of %d", ErrInvalidSpec, f.name, f.id, n)
		}
	}
	t := &Tokenizer{
		tokens: spec.Tokens,
		scores: spec.Scores,
		bos:    int32(spec.BOS), eos: int32(spec.EOS), unk: int32(spec.UNK), pad: int32(spec.PAD),
		addBOS: spec.AddBOS, addEOS: spec.AddEOS,
	}
	if t.scores == nil {
		t.scores = make([]float32, n)
	}
	switch spec.Model {
	case "llama":
		t.kind = kindSPM
		t.spacePrefix = !spec.NoSpacePrefix
	case "gpt2":
		t.kind = kindBPE
	default:
		return nil, fmt.Errorf("%w: tokenizer model %q (want \"llama\" or \"gpt2\")", ErrUnsupported, spec.Model)
	}
	t.types = spec.Types
	if t.types == nil {
		t.types = t.inferTypes()
	}
	if t.kind == kindBPE {
		pre, ignoreMerges, err := preForName(spec.Pre)
		if err != nil {
			return nil, err
		}
		merges := make([][2]string, 0, len(spec.Merges))
		for i, m := range spec.Merges {
			// The separator is the first space after the first byte: a
			// byte-level token never holds a raw space, but be lenient.
			k := strings.IndexByte(m[min(1, len(m)):], ' ')
			if k < 0 {
				return nil, fmt.Errorf("%w: merge %d %q has no space", ErrInvalidSpec, i, m)
			}
			k += min(1, len(m))
			merges = append(merges, [2]string{m[:k], m[k+1:]})
		}
		t.bpe = &bpeModel{pre: pre, ignoreMerges: ignoreMerges}
		if err := t.finish(merges); err != nil {
			return nil, err
		}
	} else if err := t.finish(nil); err != nil {
		return nil, err
	}
	for _, id := range spec.ExtraEOG {
		if id >= 0 && int(id) < n {
			t.eog[id] = true
		}
	}
	t.harmonyEOG()
	return t, nil
}

// harmonyEOG follows llama.cpp for gpt-oss's harmony format: a vocabulary
// with <|return|> and <|call|> ends generation on those, not on <|end|>,
// which closes the analysis message a final answer follows.
func (t *Tokenizer) harmonyEOG() {
	_, ret := t.textID["<|return|>"]
	_, call := t.textID["<|call|>"]
	if end, ok := t.textID["<|end|>"]; ok && ret && call {
		t.eog[end] = false
	}
}

// inferTypes guesses token types when the vocabulary has none.
func (t *Tokenizer) inferTypes() []int32 {
	types := make([]int32, len(t.tokens))
	for i, s := range t.tokens {
		types[i] = TypeNormal
		if t.kind == kindSPM {
			if _, ok := parseByteToken(s); ok {
				types[i] = TypeByte
			}
		}
	}
	for _, id := range []int32{t.bos, t.eos} {
		if id >= 0 {
			types[id] = TypeControl
		}
	}
	if t.unk >= 0 {
		types[t.unk] = TypeUnknown
	}
	return types
}

// finish builds the derived tables shared by New and FromHF.
func (t *Tokenizer) finish(merges [][2]string) error {
	n := len(t.tokens)
	t.textID = make(map[string]int32, n)
	for i, s := range t.tokens {
		if _, dup := t.textID[s]; !dup {
			t.textID[s] = int32(i)
		}
	}
	for i := range t.byteTok {
		t.byteTok[i] = -1
	}
	if t.kind == kindSPM {
		for i, s := range t.tokens {
			if b, ok := parseByteToken(s); ok && t.byteTok[b] < 0 {
				t.byteTok[b] = int32(i)
			}
		}
	}
	t.buildPieces()
	if t.kind == kindBPE {
		if err := t.bpe.init(t, merges); err != nil {
			return err
		}
	}
	t.specials.build(t)

	t.eog = make([]bool, n)
	if t.eos >= 0 {
		t.eog[t.eos] = true
	}
	for _, s := range eogTexts {
		if id, ok := t.textID[s]; ok {
			t.eog[id] = true
		}
	}
	return nil
}

// buildPieces fills pieceData/pieceOff with each token's decoded bytes.
func (t *Tokenizer) buildPieces() {
	t.pieceOff = make([]uint32, len(t.tokens)+1)
	t.pieceData = make([]byte, 0, len(t.tokens)*6)
	for i, s := range t.tokens {
		t.pieceOff[i] = uint32(len(t.pieceData))
		typ := t.types[i]
		switch {
		case typ == TypeControl || typ == TypeUnused:
			t.pieceData = append(t.pieceData, s...)
		case t.kind == kindSPM:
			switch typ {
			case TypeByte:
				if b, ok := parseByteToken(s); ok {
					t.pieceData = append(t.pieceData, b)
				}
			case TypeUnknown:
				t.pieceData = append(t.pieceData, "▅"...) // llama.cpp's rendering of <unk>
			default:
				t.pieceData = appendUnescapedSpaces(t.pieceData, s)
			}
		default: // byte-level BPE
			if typ == TypeNormal || typ == TypeByte {
				t.pieceData = appendByteLevelDecoded(t.pieceData, s)
			} else {
				t.pieceData = append(t.pieceData, s...)
			}
		}
	}
	t.pieceOff[len(t.tokens)] = uint32(len(t.pieceData))
}

// parseByteToken parses SentencePiece's byte fallback token text "<0xNN>".
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(s[3])
	lo, ok2 := hexVal(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// appendUnescapedSpaces appends s with SentencePiece's "▁" turned back into spaces.
func appendUnescapedSpaces(dst []byte, s string) []byte {
	for {
		k := strings.Index(s, "▁")
		if k < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:k]...)
		dst = append(dst, ' ')
		s = s[k+len("▁"):]
	}
}

// VocabSize is the number of token ids (the highest id + 1).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS is the beginning-of-sequence id, or -1.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence id, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// IsEOG reports whether id ends generation: EOS, Spec.ExtraEOG, and the
// end-of-turn tokens of common chat formats (<|im_end|>, <|endoftext|>,
// <|eot_id|>, <end_of_turn>, …) when the vocabulary has them.
func (t *Tokenizer) IsEOG(id int32) bool {
	return id >= 0 && int(id) < len(t.eog) && t.eog[id]
}

// TokenID looks a token up by its exact vocabulary text: the stored form,
// e.g. "▁the" (llama), "Ġthe" (gpt2), "<|im_start|>".
func (t *Tokenizer) TokenID(text string) (int32, bool) {
	id, ok := t.textID[text]
	return id, ok
}

// TokenBytes returns the raw bytes token id stands for (a fresh slice): the
// decoded text of a normal token, the byte of a byte token, the text of a
// control token. Nil for an id outside the vocabulary.
func (t *Tokenizer) TokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(t.tokens) {
		return nil
	}
	p := t.pieceData[t.pieceOff[id]:t.pieceOff[id+1]]
	return append([]byte(nil), p...)
}

// Encode turns text into token ids.
//
// addSpecial adds BOS (and EOS) as the vocabulary asks (Spec.AddBOS/AddEOS).
// parseSpecial makes control tokens written in the text ("<|im_start|>",
// "<s>") become their ids; without it they are encoded as plain text.
// User-defined tokens (tokenizer.json added tokens with special=false, e.g.
// Qwen3's "<think>") are always matched, as llama.cpp and Hugging Face do.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	out := make([]int32, 0, len(text)/3+2)
	if addSpecial && t.addBOS && t.bos >= 0 {
		out = append(out, t.bos)
	}
	prevSpecial := true // SentencePiece puts "▁" before the first text and after each special token
	pos := 0
	for pos < len(text) {
		start, end, id, found := t.specials.find(t, text, pos, parseSpecial)
		if !found {
			start, end = len(text), len(text)
		}
		if start > pos {
			out = t.encodeText(out, text[pos:start], prevSpecial)
			prevSpecial = false
		}
		if !found {
			break
		}
		out = append(out, id)
		prevSpecial = true
		pos = end
	}
	if addSpecial && t.addEOS && t.eos >= 0 {
		out = append(out, t.eos)
	}
	return out
}

// encodeText encodes a stretch of text holding no special token.
func (t *Tokenizer) encodeText(out []int32, text string, afterSpecial bool) []int32 {
	if t.kind == kindSPM {
		return t.spmEncode(out, text, t.spacePrefix && afterSpecial)
	}
	return t.bpe.encode(t, out, text)
}

// specialMatcher finds control/user-defined/unknown tokens written in text:
// leftmost match first, then the longest token at that position.
type specialMatcher struct {
	byFirst [256][]int32
	strip   map[int32]stripFlags // Hugging Face added tokens' lstrip/rstrip
}

type stripFlags struct{ left, right bool }

func (m *specialMatcher) build(t *Tokenizer) {
	for i := range m.byFirst {
		m.byFirst[i] = nil
	}
	for i, s := range t.tokens {
		switch t.types[i] {
		case TypeControl, TypeUserDefined, TypeUnknown:
			if s != "" {
				m.byFirst[s[0]] = append(m.byFirst[s[0]], int32(i))
			}
		}
	}
	for _, ids := range m.byFirst {
		sort.SliceStable(ids, func(a, b int) bool { return len(t.tokens[ids[a]]) > len(t.tokens[ids[b]]) })
	}
}

// find returns the first special token in text[from:] (byte offsets into
// text, widened by the token's strip flags); with parseSpecial false only
// user-defined tokens count.
func (m *specialMatcher) find(t *Tokenizer, text string, from int, parseSpecial bool) (start, end int, id int32, ok bool) {
	for i := from; i < len(text); i++ {
		for _, cand := range m.byFirst[text[i]] {
			if !parseSpecial && t.types[cand] != TypeUserDefined {
				continue
			}
			tok := t.tokens[cand]
			if !strings.HasPrefix(text[i:], tok) {
				continue
			}
			start, end = i, i+len(tok)
			if f, has := m.strip[cand]; has {
				if f.left {
					for start > from {
						r, w := utf8.DecodeLastRuneInString(text[from:start])
						if !unicode.IsSpace(r) {
							break
						}
						start -= w
					}
				}
				if f.right {
					for end < len(text) {
						r, w := utf8.DecodeRuneInString(text[end:])
						if !unicode.IsSpace(r) {
							break
						}
						end += w
					}
				}
			}
			return start, end, cand, true
		}
	}
	return 0, 0, -1, false
}
