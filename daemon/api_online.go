package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/wire"
)

// The online endpoints run one request on the same engine as the batches,
// validated by the same rules (with the daemon's batch-level defaults).

// handleOnline serves POST /v1/chat/completions, /v1/completions,
// /v1/embeddings and /v1/responses.
func (d *Daemon) handleOnline(endpoint string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(d.cfg.Pipeline.MaxLineBytes)))
		if err != nil {
			writeBodyError(w, err, "request_too_large", "")
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
		if stream && endpoint == engine.EndpointResponses {
			writeAPIError(w, http.StatusBadRequest, "unsupported_value", "stream", "stream: true is not supported on /v1/responses yet: leave stream out (the whole Response comes in one answer), or stream on /v1/chat/completions")
			return
		}
		if stream && endpoint == wire.EndpointMessages {
			writeAPIError(w, http.StatusBadRequest, "unsupported_parameter", "stream", "/v1/messages does not stream")
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
		// A /v1/messages request runs as the chat request it translates to.
		req := &engine.Request{CustomID: "online", Endpoint: res.Request.URL, Body: res.Request.Body, Priority: d.cfg.API.onlineRank()}
		var st *streamer
		if stream {
			st = newStreamer(w, endpoint)
			req.Stream = st.delta
		}
		ans := make(chan answer, 1)
		go func() {
			// Not the handler's goroutine: net/http would not recover a
			// panic here, and one request would take the daemon down.
			defer func() {
				if v := recover(); v != nil {
					d.log.Error("engine panicked on an online request; failing that request", "path", r.URL.Path,
						"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
					ans <- answer{engine.Recovered(v), nil}
				}
			}()
			resp, err := d.eng.Do(r.Context(), req)
			ans <- answer{resp, err}
		}()
		var resp *engine.Response
		if st != nil {
			resp, err = st.relay(ans)
		} else {
			a := <-ans
			resp, err = a.resp, a.err
		}
		switch {
		case errors.Is(err, engine.ErrUnavailable):
			if st != nil && st.started {
				st.fail(err)
				return
			}
			writeAPIError(w, http.StatusServiceUnavailable, "engine_unavailable", "", "the engine is unavailable: %v", err)
			return
		case err != nil:
			if r.Context().Err() != nil {
				return // the client went away
			}
			if st != nil && st.started {
				st.fail(err)
				return
			}
			logAPI(d.log, r, err)
			writeAPIError(w, http.StatusInternalServerError, "", "", "the engine failed: %v", err)
			return
		}
		if p := pipeline.AnswerProblem(resp); p != "" {
			// What a batch would write as an engine_bad_response line is
			// never passed on as an answer.
			d.log.Warn("engine answer refused", "path", r.URL.Path, "problem", p)
			if st != nil && st.started {
				fmt.Fprintf(st.w, "data: %s\n\n", wire.NewError(wire.TypeServerError, p, "", pipeline.CodeBadResponse).JSON())
				return
			}
			writeAPIError(w, http.StatusBadGateway, pipeline.CodeBadResponse, "", "%s", p)
			return
		}
		if res.Request.LineURL == wire.EndpointMessages && resp.StatusCode >= 200 && resp.StatusCode < 300 {
			msg, err := wire.ChatToMessage(resp.Body)
			if err != nil {
				writeAPIError(w, http.StatusBadGateway, pipeline.CodeBadResponse, "", "the engine's answer cannot be translated to a /v1/messages answer: %v", err)
				return
			}
			resp = &engine.Response{StatusCode: resp.StatusCode, RequestID: resp.RequestID, Body: msg}
		}
		if resp.RequestID != "" && (st == nil || !st.started) {
			w.Header().Set("X-Request-Id", resp.RequestID)
		}
		if st != nil && st.started && resp.StatusCode != http.StatusOK {
			// Failed after its first tokens went out (a recovered engine
			// panic): the error body is the stream's last event.
			fmt.Fprintf(st.w, "data: %s\n\n", resp.Body)
			return
		}
		if st == nil || (resp.StatusCode != http.StatusOK && !st.started) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(resp.StatusCode)
			w.Write(resp.Body)
			return
		}
		if err := st.finish(resp.Body); err != nil {
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

// streamer sends an answer as server-sent events in OpenAI's chunk shapes
// (chat.completion.chunk / text_completion): each piece of text as the
// engine produces it (engine.Request.Stream), then a chunk with each
// choice's finish_reason, the usage, and [DONE]. For an engine that does
// not stream, the whole text of each choice comes in one chunk at the end.
type streamer struct {
	w        http.ResponseWriter
	chat     bool
	mu       sync.Mutex
	pending  []piece
	wake     chan struct{}
	started  bool         // headers sent
	sent     map[int]bool // choices that streamed text
	id       string
	created  int64
	roleSent map[int]bool
}

type piece struct {
	choice int
	text   string
}

func newStreamer(w http.ResponseWriter, endpoint string) *streamer {
	return &streamer{w: w, chat: endpoint == engine.EndpointChat, wake: make(chan struct{}, 1),
		sent: map[int]bool{}, roleSent: map[int]bool{}, id: randomID("chatcmpl-", 12), created: time.Now().Unix()}
}

// delta is engine.Request.Stream: it queues a piece and returns at once.
func (s *streamer) delta(choice int, text string) {
	s.mu.Lock()
	s.pending = append(s.pending, piece{choice, text})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// answer is what engine.Do returned.
type answer struct {
	resp *engine.Response
	err  error
}

// relay writes pieces as they come until the engine answers.
func (s *streamer) relay(ans <-chan answer) (*engine.Response, error) {
	for {
		select {
		case a := <-ans:
			return a.resp, a.err
		case <-s.wake:
			s.flushPieces()
		}
	}
}

func (s *streamer) flushPieces() {
	s.mu.Lock()
	ps := s.pending
	s.pending = nil
	s.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	s.begin()
	var buf bytes.Buffer
	for _, p := range ps {
		s.sent[p.choice] = true
		s.chunk(&buf, s.deltaChoice(p.choice, p.text, nil), nil)
	}
	s.w.Write(buf.Bytes())
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *streamer) begin() {
	if s.started {
		return
	}
	s.started = true
	s.w.Header().Set("Content-Type", "text/event-stream")
	s.w.Header().Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
}

func (s *streamer) deltaChoice(index int, text string, finish *string) map[string]any {
	if !s.chat {
		return map[string]any{"index": index, "text": text, "logprobs": nil, "finish_reason": finish}
	}
	delta := map[string]any{}
	if !s.roleSent[index] {
		delta["role"] = "assistant"
		s.roleSent[index] = true
	}
	if text != "" || finish == nil {
		delta["content"] = text
	}
	return map[string]any{"index": index, "delta": delta, "logprobs": nil, "finish_reason": finish}
}

func (s *streamer) chunk(buf *bytes.Buffer, choice map[string]any, usage json.RawMessage) {
	obj := map[string]any{"id": s.id, "created": s.created, "model": "", "choices": []any{}}
	if choice != nil {
		obj["choices"] = []any{choice}
	}
	if usage != nil {
		obj["usage"] = usage
	}
	if s.chat {
		obj["object"] = "chat.completion.chunk"
	} else {
		obj["object"] = "text_completion"
	}
	data, _ := json.Marshal(obj)
	buf.WriteString("data: ")
	buf.Write(data)
	buf.WriteString("\n\n")
}

// finish sends what the final answer adds: the text of choices that did
// not stream, each choice's finish_reason, the usage, and [DONE].
func (s *streamer) finish(body []byte) error {
	s.flushPieces()
	var full struct {
		ID      string          `json:"id"`
		Created int64           `json:"created"`
		Model   string          `json:"model"`
		Usage   json.RawMessage `json:"usage"`
		Choices []struct {
			Index   int    `json:"index"`
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &full); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	s.begin()
	var buf bytes.Buffer
	for _, c := range full.Choices {
		if !s.sent[c.Index] {
			text := c.Text
			if s.chat {
				text = c.Message.Content
			}
			s.chunk(&buf, s.deltaChoice(c.Index, text, nil), nil)
		}
		s.chunk(&buf, s.deltaChoice(c.Index, "", c.FinishReason), nil)
	}
	if len(full.Usage) > 0 && string(full.Usage) != "null" {
		s.chunk(&buf, nil, full.Usage)
	}
	buf.WriteString("data: [DONE]\n\n")
	_, err := s.w.Write(buf.Bytes())
	return err
}

// fail ends a stream that already started with an error event.
func (s *streamer) fail(err error) {
	fmt.Fprintf(s.w, "data: %s\n\n", wire.NewError(wire.TypeServerError, err.Error(), "", "").JSON())
}

// handleModels is GET /v1/models: the models the engine serves.
func (d *Daemon) handleModels(w http.ResponseWriter, r *http.Request) {
	var names []string
	if ml, ok := d.eng.(engine.ModelLister); ok {
		names = ml.Models()
	} else if d.cfg.OpenAI.Model != "" {
		names = []string{d.cfg.OpenAI.Model}
	}
	out := wire.ModelList{Object: wire.ObjectList, Data: []wire.Model{}}
	for _, n := range names {
		out.Data = append(out.Data, wire.Model{ID: n, Object: wire.ObjectModel, Created: d.started.Unix(), OwnedBy: "batchd"})
	}
	writeJSON(w, http.StatusOK, out)
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}
