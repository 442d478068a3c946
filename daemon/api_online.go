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
// /v1/embeddings, /v1/responses and /v1/messages; stream: true answers
// with server-sent events in the endpoint's own shapes (see streamer).
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
			st = newStreamer(w, endpoint, res.Request.Body)
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
				st.failBody(wire.NewError(wire.TypeServerError, p, "", pipeline.CodeBadResponse).JSON())
				return
			}
			writeAPIError(w, http.StatusBadGateway, pipeline.CodeBadResponse, "", "%s", p)
			return
		}
		if res.Request.LineURL == wire.EndpointMessages && resp.StatusCode >= 200 && resp.StatusCode < 300 {
			msg, err := wire.ChatToMessage(resp.Body)
			if err != nil && st != nil && st.started {
				st.failBody(wire.NewError(wire.TypeServerError, "the engine's answer cannot be translated to a /v1/messages answer: "+err.Error(), "", pipeline.CodeBadResponse).JSON())
				return
			}
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
			st.failBody(resp.Body)
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

// streamer sends an answer as server-sent events, each piece of text as
// the engine produces it (engine.Request.Stream), then what the final
// answer adds, in the shapes of the endpoint's events (streamEvents). For
// an engine that does not stream, the whole text comes at the end. The
// headers (200, text/event-stream) go out with the first event, so an
// answer that fails before any text is still a plain HTTP error.
type streamer struct {
	w       http.ResponseWriter
	mu      sync.Mutex
	pending []piece
	wake    chan struct{}
	started bool // headers sent
	events  streamEvents
}

// streamEvents writes an endpoint's events.
type streamEvents interface {
	// open writes the events that start the stream, before the first piece.
	open(buf *bytes.Buffer)
	// piece writes the events of one piece of text.
	piece(buf *bytes.Buffer, p piece)
	// finish writes what the final answer (body, a 200's) adds, through the
	// stream's last event.
	finish(buf *bytes.Buffer, body []byte) error
	// fail writes errBody, an OpenAI error object, as the stream's last
	// event.
	fail(buf *bytes.Buffer, errBody []byte)
}

type piece struct {
	choice int
	text   string
}

// newStreamer streams the answer to request, a validated body of endpoint.
func newStreamer(w http.ResponseWriter, endpoint string, request []byte) *streamer {
	var ev streamEvents
	switch endpoint {
	case engine.EndpointResponses:
		ev = newResponseEvents(request)
	case wire.EndpointMessages:
		ev = newMessageEvents(request)
	default:
		ev = &chunkEvents{chat: endpoint == engine.EndpointChat, sent: map[int]bool{}, roleSent: map[int]bool{},
			id: randomID("chatcmpl-", 12), created: time.Now().Unix()}
	}
	return &streamer{w: w, wake: make(chan struct{}, 1), events: ev}
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
	var buf bytes.Buffer
	s.begin(&buf)
	for _, p := range ps {
		s.events.piece(&buf, p)
	}
	s.w.Write(buf.Bytes())
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

// begin sends the headers and writes the opening events, once.
func (s *streamer) begin(buf *bytes.Buffer) {
	if s.started {
		return
	}
	s.started = true
	s.w.Header().Set("Content-Type", "text/event-stream")
	s.w.Header().Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
	s.events.open(buf)
}

// finish sends the rest of the stream: pieces still queued, then what the
// final answer body adds.
func (s *streamer) finish(body []byte) error {
	s.flushPieces()
	var buf bytes.Buffer
	s.begin(&buf)
	err := s.events.finish(&buf, body)
	if err != nil {
		s.events.fail(&buf, wire.NewError(wire.TypeServerError, err.Error(), "", pipeline.CodeBadResponse).JSON())
	}
	if _, werr := s.w.Write(buf.Bytes()); err == nil {
		err = werr
	}
	return err
}

// failBody ends a stream that already started with errBody, an OpenAI
// error object.
func (s *streamer) failBody(errBody []byte) {
	var buf bytes.Buffer
	s.events.fail(&buf, errBody)
	s.w.Write(buf.Bytes())
}

// fail ends a stream that already started with an error event.
func (s *streamer) fail(err error) {
	s.failBody(wire.NewError(wire.TypeServerError, err.Error(), "", "").JSON())
}

// chunkEvents are OpenAI's chunk shapes (chat.completion.chunk /
// text_completion): a chunk per piece, then a chunk with each choice's
// finish_reason, the usage, and [DONE].
type chunkEvents struct {
	chat     bool
	sent     map[int]bool // choices that streamed text
	id       string
	created  int64
	roleSent map[int]bool
}

func (c *chunkEvents) open(*bytes.Buffer) {}

func (c *chunkEvents) piece(buf *bytes.Buffer, p piece) {
	c.sent[p.choice] = true
	c.chunk(buf, c.deltaChoice(p.choice, p.text, nil), nil)
}

func (c *chunkEvents) deltaChoice(index int, text string, finish *string) map[string]any {
	if !c.chat {
		return map[string]any{"index": index, "text": text, "logprobs": nil, "finish_reason": finish}
	}
	delta := map[string]any{}
	if !c.roleSent[index] {
		delta["role"] = "assistant"
		c.roleSent[index] = true
	}
	if text != "" || finish == nil {
		delta["content"] = text
	}
	return map[string]any{"index": index, "delta": delta, "logprobs": nil, "finish_reason": finish}
}

func (c *chunkEvents) chunk(buf *bytes.Buffer, choice map[string]any, usage json.RawMessage) {
	obj := map[string]any{"id": c.id, "created": c.created, "model": "", "choices": []any{}}
	if choice != nil {
		obj["choices"] = []any{choice}
	}
	if usage != nil {
		obj["usage"] = usage
	}
	if c.chat {
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
func (c *chunkEvents) finish(buf *bytes.Buffer, body []byte) error {
	var full struct {
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
	for _, ch := range full.Choices {
		if !c.sent[ch.Index] {
			text := ch.Text
			if c.chat {
				text = ch.Message.Content
			}
			c.chunk(buf, c.deltaChoice(ch.Index, text, nil), nil)
		}
		c.chunk(buf, c.deltaChoice(ch.Index, "", ch.FinishReason), nil)
	}
	if len(full.Usage) > 0 && string(full.Usage) != "null" {
		c.chunk(buf, nil, full.Usage)
	}
	buf.WriteString("data: [DONE]\n\n")
	return nil
}

func (c *chunkEvents) fail(buf *bytes.Buffer, errBody []byte) {
	fmt.Fprintf(buf, "data: %s\n\n", errBody)
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
