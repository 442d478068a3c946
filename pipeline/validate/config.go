package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/batchd/batchd/wire"
)

// Config is what a Checker needs from the batch options.
type Config struct {
	// Defaults are batch-level body fields (e.g. "max_tokens", "model",
	// "temperature", "top_p", "top_k", "min_p", "presence_penalty",
	// "frequency_penalty", "repetition_penalty", "seed", "stop"), merged into
	// each body under its own fields:
	//   - a body key that is absent, or present with null, takes the default
	//     (null counts as "not set", so Python's None serialized as null gets
	//     the batch default rather than the engine's);
	//   - the max_tokens default is not added to a body that gives
	//     max_completion_tokens;
	//   - a default goes only to endpoints it belongs to: sampling fields to
	//     chat and completions, dimensions and encoding_format to embeddings,
	//     top_logprobs to chat, logprobs to chat when it is a boolean and to
	//     completions when it is an integer; model and keys the rules do not
	//     know (vLLM extras such as ignore_eos) go to every endpoint.
	Defaults map[string]json.RawMessage
	// RejectMissingMaxTokens refuses a chat or completions line that gives
	// no output length and gets none from Defaults (missing_max_tokens);
	// otherwise such a line generates until the model's context is full.
	RejectMissingMaxTokens bool
	// Overrides are body fields set on every body whatever it holds (the
	// batch option model_override gives "model"); each is checked with the
	// same rules as a default, and wins over a default of the same key.
	Overrides map[string]json.RawMessage
}

// Validate checks each default with the rules of the body field of the same
// name. It returns every failure, joined, each naming its field, e.g.
// `temperature: must be between 0 and 2`; each is a *Problem.
//
// messages, prompt and input cannot be defaults, nor max_completion_tokens
// (the batch-level output length is max_tokens: a default
// max_completion_tokens would override a request's own max_tokens).
func (c Config) Validate() error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(c.Defaults)) {
		if p := checkDefault(k, c.Defaults[k]); p != nil {
			errs = append(errs, p)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Overrides)) {
		if p := checkDefault(k, c.Overrides[k]); p != nil {
			errs = append(errs, p)
		}
	}
	if v, ok := c.Defaults["top_logprobs"]; ok && given(bytes.TrimSpace(v)) {
		if !isTrue(bytes.TrimSpace(c.Defaults["logprobs"])) {
			errs = append(errs, badRequest(CodeInvalidValue, "top_logprobs", "requires a logprobs default of true"))
		}
	}
	return errors.Join(errs...)
}

// checkDefault checks one default value; nil when it may be merged.
func checkDefault(key string, raw json.RawMessage) *Problem {
	v := bytes.TrimSpace(raw)
	if !json.Valid(v) || !utf8.Valid(v) {
		return badRequest(CodeInvalidValue, key, "must be a JSON value")
	}
	id := lookupField([]byte(key))
	switch id {
	case fUnknown:
		return nil
	case fMessages, fPrompt, fInput:
		return badRequest(CodeInvalidValue, key, "cannot be a batch-level default")
	case fMaxCompletionTokens:
		return badRequest(CodeInvalidValue, key, "cannot be a batch-level default: set max_tokens")
	}
	if !given(v) {
		return nil
	}
	if id == fLogprobs {
		if isBool(v) {
			return nil
		}
		r := wire.CompletionsLogprobs
		r.Param, r.Message = key, "must be a boolean (chat) or an integer between 0 and 5 (completions)"
		return checkInt(v, r)
	}
	// Each remaining field has the same rule on every endpoint it belongs to.
	ep := fieldEndpoints[id]
	if ep&epChat != 0 {
		ep = epChat
	}
	return checkField(id, v, ep)
}

// defaultItem is one compiled default.
type defaultItem struct {
	key    string
	val    []byte // compact JSON
	member []byte // `"key":val`, ready to append
	eps    endpoint
	field  fieldID
	force  bool // an override: replaces the body's own value
}

// defaultSet is Config.Defaults compiled for merging.
type defaultSet struct {
	items   []defaultItem // sorted by key, so merged bodies are deterministic
	byField [numFields]int
	extra   []int // items whose key is no known field
}

// compileConfig compiles cfg's defaults and overrides.
func compileConfig(cfg Config) defaultSet {
	if len(cfg.Overrides) == 0 {
		return compileDefaults(cfg.Defaults)
	}
	all := maps.Clone(cfg.Defaults)
	if all == nil {
		all = make(map[string]json.RawMessage, len(cfg.Overrides))
	}
	maps.Copy(all, cfg.Overrides)
	ds := compileDefaults(all)
	for i := range ds.items {
		if _, ok := cfg.Overrides[ds.items[i].key]; ok {
			ds.items[i].force = true
		}
	}
	return ds
}

// compileDefaults compiles the defaults that Validate accepts; others are
// dropped (callers validate first), as are null ones (a null default is the
// same as none).
func compileDefaults(defaults map[string]json.RawMessage) defaultSet {
	var ds defaultSet
	for i := range ds.byField {
		ds.byField[i] = -1
	}
	var topLogprobsOK bool
	if v, ok := defaults["logprobs"]; ok {
		topLogprobsOK = isTrue(bytes.TrimSpace(v))
	}
	for _, k := range slices.Sorted(maps.Keys(defaults)) {
		raw := defaults[k]
		if checkDefault(k, raw) != nil {
			continue
		}
		var val bytes.Buffer
		if err := json.Compact(&val, raw); err != nil || isNull(val.Bytes()) {
			continue
		}
		id := lookupField([]byte(k))
		if id == fTopLogprobs && !topLogprobsOK {
			continue
		}
		eps := epAll
		if id != fUnknown {
			eps = fieldEndpoints[id]
		}
		if id == fLogprobs {
			eps = epCompletions
			if isBool(val.Bytes()) {
				eps = epChat
			}
		}
		qk, err := json.Marshal(k)
		if err != nil {
			continue
		}
		member := make([]byte, 0, len(qk)+1+val.Len())
		member = append(append(append(member, qk...), ':'), val.Bytes()...)
		ds.items = append(ds.items, defaultItem{key: k, val: val.Bytes(), member: member, eps: eps, field: id})
	}
	for i, it := range ds.items {
		if it.field == fUnknown {
			ds.extra = append(ds.extra, i)
		} else {
			ds.byField[it.field] = i
		}
	}
	return ds
}

// index returns the item for a body key, or -1.
func (ds *defaultSet) index(id fieldID, key []byte) int {
	if id != fUnknown {
		return ds.byField[id]
	}
	for _, i := range ds.extra {
		if ds.items[i].key == string(key) {
			return i
		}
	}
	return -1
}

// memberState is what a body holds for one default's key.
type memberState struct {
	present bool // the key is in the body
	null    bool // ... with the value null (last occurrence)
	vs, ve  int  // the value's offsets in the body
}

// mergePlan is the per-body scratch of a merge; reused between bodies.
type mergePlan struct {
	st     []memberState
	apply  []bool
	splice []int // items whose null value in the body is replaced
	any    bool
}

func (mp *mergePlan) reset(n int) {
	mp.st = slices.Grow(mp.st[:0], n)[:n]
	clear(mp.st)
	mp.apply = slices.Grow(mp.apply[:0], n)[:n]
	clear(mp.apply)
	mp.splice = mp.splice[:0]
	mp.any = false
}

// see records a body member for the defaults.
func (mp *mergePlan) see(ds *defaultSet, id fieldID, key []byte, vs, ve int, val []byte) {
	if len(ds.items) == 0 {
		return
	}
	if j := ds.index(id, key); j >= 0 {
		mp.st[j] = memberState{present: true, null: isNull(val), vs: vs, ve: ve}
	}
}

// plan decides which defaults apply to a body for ep. maxCompletion tells
// whether the body gives max_completion_tokens (then no max_tokens default).
func (mp *mergePlan) plan(ds *defaultSet, ep endpoint, maxCompletion bool) {
	for j := range ds.items {
		it := &ds.items[j]
		st := mp.st[j]
		if it.eps&ep == 0 || (st.present && !st.null && !it.force) {
			continue
		}
		if it.field == fMaxTokens && maxCompletion {
			continue
		}
		mp.apply[j] = true
		mp.any = true
		if st.present {
			mp.splice = append(mp.splice, j)
		}
	}
	// Splices are written in body order.
	slices.SortFunc(mp.splice, func(a, b int) int { return mp.st[a].vs - mp.st[b].vs })
}

// merge appends to dst the body with the planned defaults merged in: null
// values replaced in place, absent keys appended before the closing brace in
// key order. body is a valid JSON object with no surrounding space.
func (mp *mergePlan) merge(dst []byte, ds *defaultSet, body []byte, hasMembers bool) []byte {
	cur := 0
	for _, j := range mp.splice {
		st := mp.st[j]
		dst = append(dst, body[cur:st.vs]...)
		dst = append(dst, ds.items[j].val...)
		cur = st.ve
	}
	dst = append(dst, body[cur:len(body)-1]...)
	for j := range ds.items {
		if !mp.apply[j] || mp.st[j].present {
			continue
		}
		if hasMembers {
			dst = append(dst, ',')
		}
		hasMembers = true
		dst = append(dst, ds.items[j].member...)
	}
	return append(dst, '}')
}

// mergedLen bounds the length of the merged body.
func (mp *mergePlan) mergedLen(ds *defaultSet, body []byte) int {
	n := len(body)
	for j := range ds.items {
		if mp.apply[j] {
			n += len(ds.items[j].member) + 1
		}
	}
	return n
}
