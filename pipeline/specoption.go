package pipeline

import (
	"encoding/json"
	"fmt"

	"github.com/batchd/batchd/wire"
)

// SpecOption is the batch option speculative: false, true, "ngram" or
// "draft", as the body field of that name, which it fills in on the lines
// that lack it. It holds one of wire's Spec constants ("" unset).
type SpecOption string

// UnmarshalJSON reads false, true or a method's name.
func (s *SpecOption) UnmarshalJSON(b []byte) error {
	mode, bad := wire.ParseSpeculative(b)
	if bad != nil {
		return fmt.Errorf("speculative: %s", bad.Message)
	}
	*s = SpecOption(mode)
	return nil
}

// UnmarshalYAML reads the same values from the daemon's config (YAML's
// booleans and strings).
func (s *SpecOption) UnmarshalYAML(unmarshal func(any) error) error {
	var v any
	if err := unmarshal(&v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("speculative: %w", err)
	}
	return s.UnmarshalJSON(b)
}

// MarshalJSON writes the body field's value.
func (s SpecOption) MarshalJSON() ([]byte, error) {
	switch string(s) {
	case wire.SpecDefault:
		return []byte("null"), nil
	case wire.SpecOff:
		return []byte("false"), nil
	case wire.SpecOn:
		return []byte("true"), nil
	}
	return json.Marshal(string(s))
}
