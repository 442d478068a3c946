package wire

import "encoding/json"

// Speculative decoding's per-request switch: body.speculative is false
// (off), true (the model's configured method) or a method's name;
// body.disable_spec_decode true (the requests document's name) is off.
const (
	SpecDefault = ""      // not set: the engine's configured default
	SpecOff     = "off"   // false, or disable_spec_decode: true
	SpecOn      = "on"    // true: the model's configured method
	SpecNgram   = "ngram" // prompt lookup
	SpecDraft   = "draft" // the model's draft model
)

const specMessage = `must be false, true, "ngram" or "draft"`

// ParseSpeculative reads body.speculative (v a JSON value; null or empty:
// not set) as one of the Spec constants.
func ParseSpeculative(v []byte) (string, *Invalid) {
	switch s := string(v); s {
	case "", "null":
		return SpecDefault, nil
	case "false":
		return SpecOff, nil
	case "true":
		return SpecOn, nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", &Invalid{CodeInvalidType, "speculative", specMessage + ", got " + TypeName(v)}
	}
	switch s {
	case SpecNgram, SpecDraft:
		return s, nil
	}
	return "", &Invalid{CodeInvalidValue, "speculative", specMessage + `, got "` + truncate(s, 40) + `"`}
}

// SpeculativeConflict refuses disable_spec_decode: true beside a
// speculative that turns speculation on; mode is ParseSpeculative's.
func SpeculativeConflict(mode string, disable bool) *Invalid {
	if disable && mode != SpecDefault && mode != SpecOff {
		return &Invalid{CodeInvalidValue, "disable_spec_decode", "is true while speculative turns speculation on: give one of them"}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
