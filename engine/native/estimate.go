package native

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/chat"
	"github.com/batchd/batchd/engine/native/tokenizer"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/wire"
)

// PromptCounter counts the prompt tokens of requests offline with a model's
// tokenizer and chat template, exactly as the engine renders them
// (batchd stats). It needs no device.
type PromptCounter struct {
	w    *weights.Model
	tok  *tokenizer.Tokenizer
	tmpl *chat.Template
}

// OpenPromptCounter loads the model at path (a .gguf file or a Hugging Face
// directory) for counting; chatTemplate, when set, replaces the model's own
// template as native.models[].chat_template does.
func OpenPromptCounter(path, chatTemplate string) (*PromptCounter, error) {
	w, err := weights.Load(path)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	tok, err := newTokenizer(w.Tokenizer, w.Config.EOSIDs)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("load tokenizer of %s: %w", path, err)
	}
	tmpl, err := templateOf(w, chatTemplate)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("chat template of %s: %w", path, err)
	}
	return &PromptCounter{w: w, tok: tok, tmpl: tmpl}, nil
}

// templateOf is the chat template a model runs with: override (a builtin
// name or template text) when set, else the model's own; nil when none.
func templateOf(w *weights.Model, override string) (*chat.Template, error) {
	src := w.ChatTemplate
	if override != "" {
		src = override
	}
	if src == "" {
		return nil, nil
	}
	if t, ok := chat.Builtin(src); ok {
		return t, nil
	}
	return chat.Parse(src)
}

// Close releases the model's files.
func (c *PromptCounter) Close() error { return c.w.Close() }

// Count returns the prompt tokens of one request body for endpoint (as in
// a batch line's url): the rendered messages of a chat request (a
// /v1/responses or /v1/messages body counts as the chat request it runs
// as), every prompt of a completions request, every input of an
// embeddings request.
func (c *PromptCounter) Count(endpoint string, body json.RawMessage) (int, error) {
	var inv *wire.Invalid
	switch endpoint {
	case engine.EndpointResponses:
		body, inv = wire.ResponsesToChat(body)
		endpoint = engine.EndpointChat
	case wire.EndpointMessages:
		body, inv = wire.MessagesToChat(body)
		endpoint = engine.EndpointChat
	}
	if inv != nil {
		return 0, fmt.Errorf("%s: %s", inv.Param, inv.Message)
	}
	if endpoint == engine.EndpointEmbeddings {
		var b struct {
			Input json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			return 0, fmt.Errorf("body: %w", err)
		}
		inputs, err := parsePrompts(b.Input)
		if err != nil {
			return 0, errors.New("input must be a string, an array of strings or token ids")
		}
		n := 0
		for _, p := range inputs {
			n += len(embedIDs(c.tok, p))
		}
		return n, nil
	}
	if endpoint != engine.EndpointChat && endpoint != engine.EndpointCompletions {
		return 0, fmt.Errorf("unknown endpoint %q", endpoint)
	}
	p, resp := parseRequest(&engine.Request{Endpoint: endpoint, Body: body})
	if resp == nil {
		var prompts [][]int32
		if prompts, resp = encodePrompts(c.tok, c.tmpl, "", endpoint, p); resp == nil {
			n := 0
			for _, pr := range prompts {
				n += len(pr)
			}
			return n, nil
		}
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(resp.Body, &e)
	return 0, errors.New(e.Error.Message)
}
