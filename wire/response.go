package wire

import (
	"encoding/json"
	"strconv"
)

// Object names of the answers.
const (
	ObjectChatCompletion = "chat.completion"
	ObjectTextCompletion = "text_completion"
	ObjectList           = "list"
	ObjectEmbedding      = "embedding"
	ObjectModel          = "model"
)

// Usage is a completion's token usage. PromptTokensDetails is left out
// when nil (a server that does not count cached tokens).
type Usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails *TokenDetails `json:"prompt_tokens_details,omitempty"`
	// CompletionTokensDetails is set by an engine that speculates.
	CompletionTokensDetails *CompletionTokenDetails `json:"completion_tokens_details,omitempty"`
}

// CompletionTokenDetails is usage.completion_tokens_details: of the draft
// tokens speculative decoding proposed, those kept in the output and those
// not (OpenAI's predicted-outputs names).
type CompletionTokenDetails struct {
	AcceptedPredictionTokens int `json:"accepted_prediction_tokens"`
	RejectedPredictionTokens int `json:"rejected_prediction_tokens"`
}

// TokenDetails is usage.prompt_tokens_details.
type TokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// ChatCompletion is a /v1/chat/completions answer.
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   Usage        `json:"usage"`
}

// ChatChoice is one choice of a ChatCompletion. Logprobs is null or a
// *ChatLogprobs. StopReason is the stop string that ended the choice (as
// vLLM reports it), left out otherwise.
type ChatChoice struct {
	Index        int         `json:"index"`
	Message      ChatMessage `json:"message"`
	Logprobs     any         `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
	StopReason   any         `json:"stop_reason,omitempty"`
}

// ChatMessage is the message of a ChatChoice.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// TextCompletion is a /v1/completions answer.
type TextCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []TextChoice `json:"choices"`
	Usage   Usage        `json:"usage"`
}

// TextChoice is one choice of a TextCompletion. Logprobs is null or a
// *TextLogprobs. StopReason is as in ChatChoice.
type TextChoice struct {
	Index        int    `json:"index"`
	Text         string `json:"text"`
	Logprobs     any    `json:"logprobs"`
	FinishReason string `json:"finish_reason"`
	StopReason   any    `json:"stop_reason,omitempty"`
}

// EmbeddingList is a /v1/embeddings answer.
type EmbeddingList struct {
	Object string         `json:"object"`
	Data   []Embedding    `json:"data"`
	Model  string         `json:"model"`
	Usage  EmbeddingUsage `json:"usage"`
}

// Embedding is one vector of an EmbeddingList: []float32, or a base64
// string of little-endian float32s.
type Embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// EmbeddingUsage is an EmbeddingList's usage.
type EmbeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// ModelList is the GET /v1/models answer.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// Model is one entry of a ModelList.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ChatLogprobs is a chat choice's logprobs.
type ChatLogprobs struct {
	Content []ChatTokenLogprob `json:"content"`
	Refusal *string            `json:"refusal"`
}

// ChatTokenLogprob is one entry of ChatLogprobs.Content. TokenID is the
// token's id in the model's vocabulary (a batchd field; left out by a
// server that does not give it).
type ChatTokenLogprob struct {
	TokenID     *int32           `json:"token_id,omitempty"`
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []ChatTopLogprob `json:"top_logprobs"`
}

// ChatTopLogprob is one alternative of a ChatTokenLogprob; TokenID as there.
type ChatTopLogprob struct {
	TokenID *int32  `json:"token_id,omitempty"`
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// TextLogprobs is a text completion choice's (legacy) logprobs. TokenIDs
// and TopTokens are batchd's (left out by a server that does not give
// them): each token's id, and each token's top alternatives as chat gives
// them, with ids and exact bytes, best first (top_logprobs is keyed by
// text, which merges tokens of the same text and loses partial bytes).
type TextLogprobs struct {
	Tokens        []string           `json:"tokens"`
	TokenLogprobs []float64          `json:"token_logprobs"`
	TopLogprobs   []TopByText        `json:"top_logprobs"`
	TextOffset    []int              `json:"text_offset"`
	TokenIDs      []int32            `json:"token_ids,omitempty"`
	TopTokens     [][]ChatTopLogprob `json:"top_tokens,omitempty"`
}

// TopByText is a legacy top_logprobs entry, {token text: logprob}, written
// in its order (best first); of entries with the same text the first
// counts.
type TopByText []TextLogprob

// TextLogprob is one entry of a TopByText.
type TextLogprob struct {
	Text    string
	Logprob float64
}

// MarshalJSON writes t as one object, keys in t's order.
func (t TopByText) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	seen := make(map[string]bool, len(t))
	for _, e := range t {
		if seen[e.Text] {
			continue
		}
		seen[e.Text] = true
		if len(b) > 1 {
			b = append(b, ',')
		}
		k, err := json.Marshal(e.Text)
		if err != nil {
			return nil, err
		}
		b = append(b, k...)
		b = append(b, ':')
		b = strconv.AppendFloat(b, e.Logprob, 'g', -1, 64)
	}
	return append(b, '}'), nil
}
