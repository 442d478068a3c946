package echo

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/batchd/batchd/wire"
)

// MaxBody bounds a request body.
const MaxBody = 64 << 20

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.post(s.chat))
	mux.HandleFunc("POST /v1/completions", s.post(s.completions))
	mux.HandleFunc("POST /v1/embeddings", s.post(s.embeddings))
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, wire.TypeInvalidRequest, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// post reads the body, checks it is a JSON object and hands it to answer,
// which returns the answer object or an error status and message.
func (s *Server) post(answer func(body []byte) (any, int, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
		if err != nil {
			writeError(w, http.StatusBadRequest, wire.TypeInvalidRequest, fmt.Sprintf("read body: %v", err))
			return
		}
		if !isObject(body) {
			writeError(w, http.StatusBadRequest, wire.TypeInvalidRequest, "request body is not a JSON object")
			return
		}
		out, status, msg := answer(body)
		if status != 0 {
			writeError(w, status, wire.TypeInvalidRequest, msg)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func (s *Server) created() int64 {
	if s.opts.Now != nil {
		return s.opts.Now().Unix()
	}
	return DefaultCreated
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

func (s *Server) chat(body []byte) (any, int, string) {
	var req struct {
		Model               string    `json:"model"`
		Messages            []message `json:"messages"`
		MaxTokens           *int      `json:"max_tokens"`
		MaxCompletionTokens *int      `json:"max_completion_tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, http.StatusBadRequest, fmt.Sprintf("invalid chat request: %v", err)
	}
	if len(req.Messages) == 0 {
		return nil, http.StatusBadRequest, "messages: at least one message is required"
	}
	limit := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		limit = req.MaxCompletionTokens
	}
	prompt, last := 0, ""
	for _, m := range req.Messages {
		text := contentText(m.Content)
		prompt += len(strings.Fields(text))
		if m.Role == "user" {
			last = text
		}
	}
	content, finish := echo(last, limit)
	completion := len(strings.Fields(content))
	return wire.ChatCompletion{
		ID:      "chatcmpl-" + hash(body),
		Object:  wire.ObjectChatCompletion,
		Created: s.created(),
		Model:   modelName(req.Model),
		Choices: []wire.ChatChoice{{Message: wire.ChatMessage{Role: "assistant", Content: content}, FinishReason: finish}},
		Usage:   wire.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion},
	}, 0, ""
}

func (s *Server) completions(body []byte) (any, int, string) {
	var req struct {
		Model     string          `json:"model"`
		Prompt    json.RawMessage `json:"prompt"`
		MaxTokens *int            `json:"max_tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, http.StatusBadRequest, fmt.Sprintf("invalid completions request: %v", err)
	}
	prompts, ok := stringOrStrings(req.Prompt)
	if !ok {
		return nil, http.StatusBadRequest, "prompt: must be a string or an array of strings"
	}
	var u wire.Usage
	choices := make([]wire.TextChoice, len(prompts))
	for i, p := range prompts {
		text, finish := echo(p, req.MaxTokens)
		u.PromptTokens += len(strings.Fields(p))
		u.CompletionTokens += len(strings.Fields(text))
		choices[i] = wire.TextChoice{Index: i, Text: text, FinishReason: finish}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return wire.TextCompletion{ID: "cmpl-" + hash(body), Object: wire.ObjectTextCompletion, Created: s.created(),
		Model: modelName(req.Model), Choices: choices, Usage: u}, 0, ""
}

func (s *Server) embeddings(body []byte) (any, int, string) {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		Dimensions     *int            `json:"dimensions"`
		EncodingFormat string          `json:"encoding_format"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, http.StatusBadRequest, fmt.Sprintf("invalid embeddings request: %v", err)
	}
	inputs, ok := stringOrStrings(req.Input)
	if !ok {
		return nil, http.StatusBadRequest, "input: must be a string or an array of strings"
	}
	dims := 8
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > 65536 {
			return nil, http.StatusBadRequest, "dimensions: must be between 1 and 65536"
		}
		dims = *req.Dimensions
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		return nil, http.StatusBadRequest, `encoding_format: must be "float" or "base64"`
	}
	data := make([]wire.Embedding, len(inputs))
	tokens := 0
	for i, in := range inputs {
		tokens += len(strings.Fields(in))
		vec := Embedding(in, dims)
		var emb any = vec
		if req.EncodingFormat == "base64" {
			buf := make([]byte, 4*len(vec))
			for j, v := range vec {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(v))
			}
			emb = base64.StdEncoding.EncodeToString(buf)
		}
		data[i] = wire.Embedding{Object: wire.ObjectEmbedding, Index: i, Embedding: emb}
	}
	return wire.EmbeddingList{Object: wire.ObjectList, Data: data, Model: modelName(req.Model),
		Usage: wire.EmbeddingUsage{PromptTokens: tokens, TotalTokens: tokens}}, 0, ""
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, wire.ModelList{Object: wire.ObjectList,
		Data: []wire.Model{{ID: DefaultModel, Object: wire.ObjectModel, Created: s.created(), OwnedBy: "batchd-stand-in"}}})
}

// Embedding returns the stand-in's embedding of input: a unit vector of dims
// float32s derived from SHA-256 of the input.
func Embedding(input string, dims int) []float32 {
	vec := make([]float32, dims)
	var block [sha256.Size]byte
	var norm float64
	for i := range vec {
		if i%8 == 0 { // 8 values per 32-byte block
			h := sha256.New()
			h.Write([]byte(input))
			_ = binary.Write(h, binary.LittleEndian, uint32(i/8))
			h.Sum(block[:0])
		}
		u := binary.LittleEndian.Uint32(block[4*(i%8):])
		v := float64(u)/float64(math.MaxUint32)*2 - 1
		vec[i] = float32(v)
		norm += v * v
	}
	if norm == 0 {
		vec[0], norm = 1, 1
	}
	inv := 1 / math.Sqrt(norm)
	for i := range vec {
		vec[i] = float32(float64(vec[i]) * inv)
	}
	return vec
}

// echo returns "echo: " and text, the text cut to limit words when limit is
// set; finish_reason is "length" when it was cut.
func echo(text string, limit *int) (string, string) {
	words := strings.Fields(text)
	finish := "stop"
	if limit != nil && *limit >= 0 && len(words) > *limit {
		words, finish = words[:*limit], "length"
	}
	return strings.TrimSpace("echo: " + strings.Join(words, " ")), finish
}

// contentText returns a message content's text: the string, or the text
// parts of a content array joined by spaces.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, " ")
}

// stringOrStrings reads a string or an array of strings.
func stringOrStrings(raw json.RawMessage) ([]string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, true
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		return ss, true
	}
	return nil, false
}

func modelName(m string) string {
	if m == "" {
		return DefaultModel
	}
	return m
}

func hash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return wire.TypeInvalidRequest
}

// WriteError answers status with an OpenAI error object of the type a
// server gives that status (rate_limit_error, server_error,
// invalid_request_error), saying msg.
func WriteError(w http.ResponseWriter, status int, msg string) {
	writeError(w, status, errorType(status), msg)
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, wire.NewError(typ, msg, "", ""))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
