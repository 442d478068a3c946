package wire

import (
	"math"
	"strconv"
)

// The limits of a request body. The validator (pipeline/validate) and the
// native engine both check a body against these rules, so a limit cannot
// differ between them; each reads the values its own way (the validator
// from raw bytes, the engine through encoding/json) and hands them here.
const (
	MaxN               = 128 // n: choices per request
	MaxStop            = 64  // stop: strings (a requests document has no limit; OpenAI has 4)
	MaxLogitBias       = 1024
	MinBias, MaxBias   = -100, 100 // a logit_bias value
	MaxTopLogprobs     = 50        // chat top_logprobs (a requests document's num_logprobs; OpenAI has 20)
	MaxTextLogprobs    = 5         // completions logprobs
	MaxTokenID         = math.MaxInt32
	MaxOutputTokens    = math.MaxInt32 // max_tokens, max_completion_tokens
	MaxCustomIDBytes   = 512
	maxQuotedByteCount = 64
)

// Invalid is a body value the rules refuse: Param is its body path, Message
// reads after it ("must be between 0 and 2"), Code is one of the Code
// constants.
type Invalid struct {
	Code, Param, Message string
}

// Error returns "param: message", the message of the 400 it becomes.
func (e *Invalid) Error() string { return e.Param + ": " + e.Message }

// Body returns the 400 body for e, exactly as the error files carry it.
func (e *Invalid) Body() []byte { return BadRequest(e.Error(), e.Param, e.Code) }

// Range is the rule of a number field: Min ≤ v ≤ Max, or Min < v ≤ Max
// when MinOpen.
type Range struct {
	Param    string
	Min, Max float64
	MinOpen  bool
	Message  string // what is refused reads: Param + ": " + Message
}

// Check refuses v outside r (NaN included).
func (r Range) Check(v float64) *Invalid {
	if !(v >= r.Min && v <= r.Max) || (r.MinOpen && v == r.Min) {
		return &Invalid{CodeInvalidValue, r.Param, r.Message}
	}
	return nil
}

// IntRange is the rule of an integer field: Min ≤ v ≤ Max.
type IntRange struct {
	Param    string
	Min, Max int64
	Message  string
}

// Check refuses v outside r.
func (r IntRange) Check(v int64) *Invalid {
	if v < r.Min || v > r.Max {
		return r.Refuse()
	}
	return nil
}

// Refuse is r's answer to a value out of range, also for one too large to
// read as an int64.
func (r IntRange) Refuse() *Invalid { return &Invalid{CodeInvalidValue, r.Param, r.Message} }

// The rules of the number fields.
var (
	Temperature         = Range{"temperature", 0, 2, false, "must be between 0 and 2"}
	TopP                = Range{"top_p", 0, 1, true, "must be greater than 0 and at most 1"}
	MinP                = Range{"min_p", 0, 1, false, "must be between 0 and 1"}
	PresencePenalty     = Range{"presence_penalty", -2, 2, false, "must be between -2 and 2"}
	FrequencyPenalty    = Range{"frequency_penalty", -2, 2, false, "must be between -2 and 2"}
	RepetitionPenalty   = Range{"repetition_penalty", 0, math.Inf(1), true, "must be greater than 0"}
	TopK                = IntRange{"top_k", -1, math.MaxInt32, "must be an integer of at least -1 (-1 or 0 disables it)"}
	MaxTokens           = IntRange{"max_tokens", 1, MaxOutputTokens, "must be a positive integer (at most 2147483647)"}
	MaxCompletionTokens = IntRange{"max_completion_tokens", 1, MaxOutputTokens, "must be a positive integer (at most 2147483647)"}
	N                   = IntRange{"n", 1, MaxN, "must be an integer between 1 and 128"}
	CompletionsLogprobs = IntRange{"logprobs", 0, MaxTextLogprobs, "must be an integer between 0 and 5"}
	TopLogprobs         = IntRange{"top_logprobs", 0, MaxTopLogprobs, "must be an integer between 0 and 50"}
	Seed                = IntRange{"seed", math.MinInt64, math.MaxInt64, "must fit in a signed 64-bit integer"}
	MinTokens           = IntRange{"min_tokens", 0, math.MaxInt32, "must be a non-negative integer"}
	Dimensions          = IntRange{"dimensions", 1, math.MaxInt32, "must be a positive integer"}
)

// StopMessage is how stop is refused, followed by what it got.
const StopMessage = "must be a string or an array of 1 to 64 strings"

// CheckStopCount refuses an array of n stop strings outside 1..MaxStop.
func CheckStopCount(n int) *Invalid {
	if n < 1 || n > MaxStop {
		return &Invalid{CodeInvalidValue, "stop", StopMessage + ", got " + strconv.Itoa(n)}
	}
	return nil
}

// CheckLogitBiasCount refuses a logit_bias of more than MaxLogitBias
// entries; n may be counted as they are read and checked at each.
func CheckLogitBiasCount(n int) *Invalid {
	if n > MaxLogitBias {
		return &Invalid{CodeInvalidValue, "logit_bias", "must have at most 1024 entries"}
	}
	return nil
}

// LogitBiasKey reads a logit_bias key: a decimal token id up to MaxTokenID.
func LogitBiasKey(key string) (int32, *Invalid) {
	if len(key) == 0 || len(key) > 10 {
		return 0, badKey(key)
	}
	n := int64(0)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < '0' || c > '9' {
			return 0, badKey(key)
		}
		n = n*10 + int64(c-'0')
	}
	if n > MaxTokenID {
		return 0, badKey(key)
	}
	return int32(n), nil
}

func badKey(key string) *Invalid {
	return &Invalid{CodeInvalidValue, "logit_bias", "key " + QuoteShort(key) + " is not a token id: keys must be non-negative integers written as strings"}
}

// LogitBiasNotNumber refuses the value of key, which is not a number; got
// names what it is.
func LogitBiasNotNumber(key, got string) *Invalid {
	return &Invalid{CodeInvalidType, "logit_bias", "bias for token " + QuoteShort(key) + " must be a number, got " + got}
}

// CheckLogitBias refuses a bias for key outside MinBias..MaxBias.
func CheckLogitBias(key string, v float64) *Invalid {
	if !(v >= MinBias && v <= MaxBias) {
		return &Invalid{CodeInvalidValue, "logit_bias", "bias for token " + QuoteShort(key) + " must be between -100 and 100"}
	}
	return nil
}

// TopLogprobsWithoutLogprobs refuses a chat top_logprobs given without
// logprobs: true.
func TopLogprobsWithoutLogprobs() *Invalid {
	return &Invalid{CodeInvalidValue, "top_logprobs", "requires logprobs to be true"}
}

// CheckMinTokens refuses a min_tokens above the output length maxTokens.
func CheckMinTokens(minTokens, maxTokens int64) *Invalid {
	if minTokens > maxTokens {
		return &Invalid{CodeInvalidValue, "min_tokens", "must not exceed the output length (" + strconv.FormatInt(maxTokens, 10) + " tokens)"}
	}
	return nil
}

// QuoteShort quotes s for a message, cut to a readable length.
func QuoteShort(s string) string {
	if len(s) > maxQuotedByteCount {
		return strconv.Quote(s[:maxQuotedByteCount]) + "…"
	}
	return strconv.Quote(s)
}

// TypeName names the JSON type of a raw value (no leading space) for a
// message: "a string", "an object", "null", ...
func TypeName(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
