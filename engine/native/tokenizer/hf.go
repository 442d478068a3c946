package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Hugging Face tokenizer.json, the parts a byte-level BPE needs.
type hfFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type                    string           `json:"type"`
		Vocab                   map[string]int32 `json:"vocab"`
		Merges                  json.RawMessage  `json:"merges"`
		IgnoreMerges            bool             `json:"ignore_merges"`
		ByteFallback            bool             `json:"byte_fallback"`
		UnkToken                *string          `json:"unk_token"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	} `json:"model"`
}

type hfAddedToken struct {
	ID      int32  `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
	LStrip  bool   `json:"lstrip"`
	RStrip  bool   `json:"rstrip"`
}

// hfComponent is any normalizer / pre-tokenizer / processor / decoder node.
type hfComponent struct {
	Type           string            `json:"type"`
	Normalizers    []json.RawMessage `json:"normalizers"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Processors     []json.RawMessage `json:"processors"`
	Decoders       []json.RawMessage `json:"decoders"`
	AddPrefixSpace *bool             `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Pattern        struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior         string            `json:"behavior"`
	Invert           bool              `json:"invert"`
	IndividualDigits bool              `json:"individual_digits"`
	Single           []json.RawMessage `json:"single"`
}

type hfConfig struct {
	AddBOSToken *bool           `json:"add_bos_token"`
	AddEOSToken *bool           `json:"add_eos_token"`
	BOSToken    json.RawMessage `json:"bos_token"`
	EOSToken    json.RawMessage `json:"eos_token"`
	PadToken    json.RawMessage `json:"pad_token"`
	UnkToken    json.RawMessage `json:"unk_token"`
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// FromHF builds a byte-level BPE tokenizer from a Hugging Face tokenizer.json
// (model BPE; ByteLevel pre-tokenizer, optionally after Split regexes and
// Digits; ByteLevel decoder; added tokens, special ones as control tokens)
// and tokenizer_config.json (bos/eos/pad tokens, add_bos_token,
// add_eos_token), which may be nil. Without add_bos_token in the config, a
// TemplateProcessing post-processor that starts with a special token (Llama 3)
// makes it the BOS that Encode adds.
func FromHF(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("%w: decode tokenizer.json: %v", ErrInvalidSpec, err)
	}
	if f.Model.Type != "BPE" {
		return nil, fmt.Errorf("%w: tokenizer.json model %q (want BPE)", ErrUnsupported, f.Model.Type)
	}
	if f.Model.ByteFallback {
		return nil, fmt.Errorf("%w: tokenizer.json BPE with byte_fallback (SentencePiece-style; load the GGUF vocabulary instead)", ErrUnsupported)
	}
	if p := f.Model.ContinuingSubwordPrefix; p != nil && *p != "" {
		return nil, fmt.Errorf("%w: tokenizer.json continuing_subword_prefix %q", ErrUnsupported, *p)
	}
	if s := f.Model.EndOfWordSuffix; s != nil && *s != "" {
		return nil, fmt.Errorf("%w: tokenizer.json end_of_word_suffix %q", ErrUnsupported, *s)
	}
	if err := checkNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	pre, prefixSpace, byteLevel, err := parsePreTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	if !byteLevel {
		return nil, fmt.Errorf("%w: tokenizer.json without a ByteLevel pre-tokenizer (only byte-level BPE is supported)", ErrUnsupported)
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	merges, err := parseMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}

	// Vocabulary: model.vocab, then added tokens (which may reuse or extend ids).
	n := 0
	for _, id := range f.Model.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("%w: negative id %d in vocab", ErrInvalidSpec, id)
		}
		n = max(n, int(id)+1)
	}
	for _, at := range f.AddedTokens {
		if at.ID < 0 {
			return nil, fmt.Errorf("%w: negative added token id %d", ErrInvalidSpec, at.ID)
		}
		n = max(n, int(at.ID)+1)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: empty vocabulary", ErrInvalidSpec)
	}
	if n > 4*(len(f.Model.Vocab)+len(f.AddedTokens))+1024 {
		return nil, fmt.Errorf("%w: ids up to %d for %d tokens", ErrInvalidSpec, n-1, len(f.Model.Vocab)+len(f.AddedTokens))
	}
	t := &Tokenizer{
		kind:   kindBPE,
		tokens: make([]string, n),
		types:  make([]int32, n),
		scores: make([]float32, n),
		bos:    -1, eos: -1, unk: -1, pad: -1,
	}
	for i := range t.types {
		t.types[i] = TypeUnused // ids the file leaves out
	}
	for s, id := range f.Model.Vocab {
		t.tokens[id] = s
		t.types[id] = TypeNormal
	}
	strip := map[int32]stripFlags{}
	for _, at := range f.AddedTokens {
		t.tokens[at.ID] = at.Content
		t.types[at.ID] = TypeUserDefined
		if at.Special {
			t.types[at.ID] = TypeControl
		}
		if at.LStrip || at.RStrip {
			strip[at.ID] = stripFlags{left: at.LStrip, right: at.RStrip}
		}
	}
	t.bpe = &bpeModel{pre: pre, ignoreMerges: f.Model.IgnoreMerges, prefixSpace: prefixSpace}
	if err := t.finish(merges); err != nil {
		return nil, err
	}
	t.specials.strip = strip

	lookup := func(name string, raw json.RawMessage) (int32, error) {
		s, ok, err := tokenContent(raw)
		if err != nil || !ok {
			return -1, err
		}
		id, found := t.textID[s]
		if !found {
			return -1, fmt.Errorf("%w: tokenizer_config %s %q is not in the vocabulary", ErrInvalidSpec, name, s)
		}
		return id, nil
	}
	if f.Model.UnkToken != nil {
		if id, ok := t.textID[*f.Model.UnkToken]; ok {
			t.unk = id
		}
	}

	// BOS/EOS the post-processor adds around a single sequence.
	tmplBOS, tmplEOS, err := parsePostProcessor(f.PostProcessor, t)
	if err != nil {
		return nil, err
	}
	t.bos, t.addBOS = tmplBOS, tmplBOS >= 0
	t.eos, t.addEOS = tmplEOS, tmplEOS >= 0

	if tokenizerConfigJSON != nil {
		var c hfConfig
		if err := json.Unmarshal(tokenizerConfigJSON, &c); err != nil {
			return nil, fmt.Errorf("%w: decode tokenizer_config.json: %v", ErrInvalidSpec, err)
		}
		for _, f := range []struct {
			name   string
			raw    json.RawMessage
			dst    *int32
			strict bool // a BOS/EOS the vocabulary lacks is an error; a missing pad/unk is ignored
		}{{"bos_token", c.BOSToken, &t.bos, true}, {"eos_token", c.EOSToken, &t.eos, true}, {"pad_token", c.PadToken, &t.pad, false}, {"unk_token", c.UnkToken, &t.unk, false}} {
			id, err := lookup(f.name, f.raw)
			if err != nil && f.strict {
				return nil, err
			}
			if id >= 0 {
				*f.dst = id
			}
		}
		if c.AddBOSToken != nil {
			t.addBOS = *c.AddBOSToken
		}
		if c.AddEOSToken != nil {
			t.addEOS = *c.AddEOSToken
		}
	}
	t.addBOS = t.addBOS && t.bos >= 0
	t.addEOS = t.addEOS && t.eos >= 0
	if t.eos >= 0 {
		t.eog[t.eos] = true
	}
	t.harmonyEOG()
	return t, nil
}

// tokenContent reads a config token: a string, an AddedToken object or null.
func tokenContent(raw json.RawMessage) (string, bool, error) {
	if isNull(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", false, fmt.Errorf("%w: tokenizer_config token %s: %v", ErrInvalidSpec, raw, err)
	}
	return obj.Content, true, nil
}

func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var asStrings []string
	if err := json.Unmarshal(raw, &asStrings); err == nil {
		out := make([][2]string, 0, len(asStrings))
		for i, m := range asStrings {
			k := strings.IndexByte(m[min(1, len(m)):], ' ')
			if k < 0 {
				return nil, fmt.Errorf("%w: merge %d %q has no space", ErrInvalidSpec, i, m)
			}
			k += min(1, len(m))
			out = append(out, [2]string{m[:k], m[k+1:]})
		}
		return out, nil
	}
	var asPairs [][]string
	if err := json.Unmarshal(raw, &asPairs); err != nil {
		return nil, fmt.Errorf("%w: tokenizer.json merges: %v", ErrInvalidSpec, err)
	}
	out := make([][2]string, 0, len(asPairs))
	for i, p := range asPairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("%w: merge %d has %d parts", ErrInvalidSpec, i, len(p))
		}
		out = append(out, [2]string{p[0], p[1]})
	}
	return out, nil
}

func checkNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%w: tokenizer.json normalizer: %v", ErrInvalidSpec, err)
	}
	switch c.Type {
	case "NFC":
		// Not applied: see the package doc. NFC text (nearly all text) is unaffected.
		return nil
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := checkNormalizer(n); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%w: tokenizer.json normalizer %q", ErrUnsupported, c.Type)
}

// parsePreTokenizer flattens the pre-tokenizer into split stages and reports
// ByteLevel's add_prefix_space and whether there is a ByteLevel step at all.
func parsePreTokenizer(raw json.RawMessage) (p pipeline, prefixSpace, byteLevel bool, err error) {
	if isNull(raw) {
		return nil, false, false, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, false, fmt.Errorf("%w: tokenizer.json pre_tokenizer: %v", ErrInvalidSpec, err)
	}
	switch c.Type {
	case "Sequence":
		for _, sub := range c.Pretokenizers {
			sp, ps, bl, err := parsePreTokenizer(sub)
			if err != nil {
				return nil, false, false, err
			}
			p = append(p, sp...)
			prefixSpace = prefixSpace || ps
			byteLevel = byteLevel || bl
		}
		return p, prefixSpace, byteLevel, nil
	case "ByteLevel":
		if c.UseRegex == nil || *c.UseRegex {
			p = pipeline{stageGPT2}
		}
		return p, c.AddPrefixSpace != nil && *c.AddPrefixSpace, true, nil
	case "Split":
		if c.Behavior != "Isolated" || c.Invert {
			return nil, false, false, fmt.Errorf("%w: Split pre-tokenizer behavior %q invert %v (only Isolated)", ErrUnsupported, c.Behavior, c.Invert)
		}
		switch {
		case c.Pattern.Regex != nil:
			m, err := compilePattern(*c.Pattern.Regex)
			if err != nil {
				return nil, false, false, err
			}
			return pipeline{isolated(m)}, false, false, nil
		case c.Pattern.String != nil && *c.Pattern.String != "":
			lit := *c.Pattern.String
			return pipeline{isolated(func(s string, i int) int {
				if strings.HasPrefix(s[i:], lit) {
					return len(lit)
				}
				return 0
			})}, false, false, nil
		}
		return nil, false, false, fmt.Errorf("%w: Split pre-tokenizer without a pattern", ErrInvalidSpec)
	case "Digits":
		if c.IndividualDigits {
			return pipeline{isolated(oneNumber)}, false, false, nil
		}
		return pipeline{isolated(numberRun)}, false, false, nil
	}
	return nil, false, false, fmt.Errorf("%w: tokenizer.json pre-tokenizer %q", ErrUnsupported, c.Type)
}

func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%w: tokenizer.json decoder: %v", ErrInvalidSpec, err)
	}
	switch c.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, d := range c.Decoders {
			if err := checkDecoder(d); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%w: tokenizer.json decoder %q", ErrUnsupported, c.Type)
}

// parsePostProcessor returns the special tokens a TemplateProcessing puts
// before and after a single sequence (-1 for none).
func parsePostProcessor(raw json.RawMessage, t *Tokenizer) (bos, eos int32, err error) {
	bos, eos = -1, -1
	if isNull(raw) {
		return bos, eos, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return -1, -1, fmt.Errorf("%w: tokenizer.json post_processor: %v", ErrInvalidSpec, err)
	}
	switch c.Type {
	case "ByteLevel":
		return bos, eos, nil
	case "Sequence":
		for _, p := range c.Processors {
			b, e, err := parsePostProcessor(p, t)
			if err != nil {
				return -1, -1, err
			}
			if b >= 0 {
				bos = b
			}
			if e >= 0 {
				eos = e
			}
		}
		return bos, eos, nil
	case "TemplateProcessing":
		type piece struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
		}
		var pieces []piece
		for _, r := range c.Single {
			var p piece
			if err := json.Unmarshal(r, &p); err != nil {
				return -1, -1, fmt.Errorf("%w: TemplateProcessing: %v", ErrInvalidSpec, err)
			}
			pieces = append(pieces, p)
		}
		special := func(p piece) int32 {
			if p.SpecialToken == nil {
				return -1
			}
			if id, ok := t.textID[p.SpecialToken.ID]; ok {
				return id
			}
			return -1
		}
		if len(pieces) > 0 {
			bos = special(pieces[0])
			if len(pieces) > 1 {
				eos = special(pieces[len(pieces)-1])
			}
		}
		return bos, eos, nil
	}
	return -1, -1, fmt.Errorf("%w: tokenizer.json post_processor %q", ErrUnsupported, c.Type)
}
