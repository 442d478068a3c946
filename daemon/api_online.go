package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/batchd/batchd/engine"
)

// The online endpoints run one request on the same engine as the batches,
// validated by the same rules (with the daemon's batch-level defaults).

// handleOnline serves POST /v1/chat/completions, /v1/completions and
// /v1/embeddings.
func (d *Daemon) handleOnline(endpoint string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(d.cfg.Pipeline.MaxLineBytes)))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeAPIError(w, http.StatusRequestEntityTooLarge, "request_too_large", "", "the request body is larger than %d bytes", mbe.Limit)
				return
			}
			writeAPIError(w, http.StatusBadRequest, "invalid_request", "", "reading the body: %v", err)
			return
		}
		var probe struct {
			Stream *bool `json:"stream"`
		}
		json.Unmarshal(body, &probe)
		stream := probe.Stream != nil && *probe.Stream
		if stream && endpoint == engine.EndpointEmbeddings {
			writeAPIError(w, http.StatusBadRequest, "invalid_value", "stream", "embeddings do not stream")
			return
		}
		if stream {
			body = withoutStream(body)
		}
		chk, err := d.pipe.Validator(d.cfg.API.DefaultMaxTokens)
		if err != nil {
			logAPI(d.log, r, err)
			writeAPIError(w, http.StatusInternalServerError, "", "", "validator: %v", err)
			return
		}
		line, _ := json.Marshal(map[string]any{"custom_id": "online", "method": "POST", "url": endpoint, "body": json.RawMessage(body)})
		res := chk.Check(1, line)
		if p := res.Problem; p != nil {
			param := p.Param
			msg := p.Message
			if param == "" {
				msg = p.Code + ": " + p.Message
			}
			writeAPIError(w, http.StatusBadRequest, p.Code, param, "%s", msg)
			return
		}
		resp, err := d.eng.Do(r.Context(), &engine.Request{CustomID: "online", Endpoint: endpoint, Body: res.Request.Body})
		switch {
		case errors.Is(err, engine.ErrUnavailable):
			writeAPIError(w, http.StatusServiceUnavailable, "engine_unavailable", "", "the engine is unavailable: %v", err)
			return
		case err != nil:
			if r.Context().Err() != nil {
				return // the client went away
			}
			logAPI(d.log, r, err)
			writeAPIError(w, http.StatusInternalServerError, "", "", "the engine failed: %v", err)
			return
		}
		if resp.RequestID != "" {
			w.Header().Set("X-Request-Id", resp.RequestID)
		}
		if !stream || resp.StatusCode != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(resp.StatusCode)
			w.Write(resp.Body)
			return
		}
		if err := writeStream(w, endpoint, resp.Body); err != nil {
			d.log.Warn("stream response", "error", err)
		}
	}
}

// withoutStream drops stream and stream_options from a request body (the
// engine answers whole; the answer is then sent as events).
func withoutStream(body []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	delete(m, "stream")
	delete(m, "stream_options")
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

// writeStream sends a whole answer as server-sent events in OpenAI's chunk
// shapes (chat.completion.chunk / text_completion), one chunk per choice
// with its content, then one with its finish_reason, then [DONE]. The
// engine answers a request whole, so the events come when it is done.
func writeStream(w http.ResponseWriter, endpoint string, body []byte) error {
	var full struct {
		ID      string          `json:"id"`
		Created int64           `json:"created"`
		Model   string          `json:"model"`
		Usage   json.RawMessage `json:"usage"`
		Choices []struct {
			Index        int             `json:"index"`
			Text         string          `json:"text"`
			Message      json.RawMessage `json:"message"`
			Logprobs     json.RawMessage `json:"logprobs"`
			FinishReason *string         `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &full); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	if full.Created == 0 {
		full.Created = time.Now().Unix()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	send := func(v any) {
		data, _ := json.Marshal(v)
		buf.WriteString("data: ")
		buf.Write(data)
		buf.WriteString("\n\n")
	}
	chat := endpoint == engine.EndpointChat
	for _, c := range full.Choices {
		var delta, end map[string]any
		if chat {
			var msg map[string]any
			json.Unmarshal(c.Message, &msg)
			delta = map[string]any{"index": c.Index, "delta": msg, "logprobs": c.Logprobs, "finish_reason": nil}
			end = map[string]any{"index": c.Index, "delta": map[string]any{}, "logprobs": nil, "finish_reason": c.FinishReason}
		} else {
			delta = map[string]any{"index": c.Index, "text": c.Text, "logprobs": c.Logprobs, "finish_reason": nil}
			end = map[string]any{"index": c.Index, "text": "", "logprobs": nil, "finish_reason": c.FinishReason}
		}
		for _, ch := range []map[string]any{delta, end} {
			obj := map[string]any{"id": full.ID, "created": full.Created, "model": full.Model, "choices": []any{ch}}
			if chat {
				obj["object"] = "chat.completion.chunk"
			} else {
				obj["object"] = "text_completion"
			}
			send(obj)
		}
	}
	if len(full.Usage) > 0 && string(full.Usage) != "null" {
		obj := map[string]any{"id": full.ID, "created": full.Created, "model": full.Model, "choices": []any{}, "usage": full.Usage}
		if chat {
			obj["object"] = "chat.completion.chunk"
		} else {
			obj["object"] = "text_completion"
		}
		send(obj)
	}
	buf.WriteString("data: [DONE]\n\n")
	_, err := w.Write(buf.Bytes())
	return err
}

// handleModels is GET /v1/models: the models the engine serves.
func (d *Daemon) handleModels(w http.ResponseWriter, r *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	var names []string
	if ml, ok := d.eng.(engine.ModelLister); ok {
		names = ml.Models()
	} else if d.cfg.OpenAI.Model != "" {
		names = []string{d.cfg.OpenAI.Model}
	}
	out := listPage[model]{Object: "list", Data: []model{}}
	for _, n := range names {
		out.Data = append(out.Data, model{ID: n, Object: "model", Created: d.started.Unix(), OwnedBy: "batchd"})
	}
	writeJSON(w, http.StatusOK, struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", out.Data})
}

func isLoopback(addr string) bool {
	host := addr
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		host = addr[:i]
	}
	host = strings.Trim(host, "[]")
	return host == "127.0.0.1" || host == "localhost" || host == "::1"
}
