// Package engine defines the boundary between the pipeline and whatever runs
// requests: the in-process native runner (engine/native, a later issue) or a
// remote OpenAI-compatible server (engine/openai).
//
// The pipeline never knows which implementation it talks to. Implementations
// live in their own packages and assert `var _ engine.Engine = (*T)(nil)`.
// This package imports no other batchd package but wire.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/batchd/batchd/wire"
)

// Endpoints an engine may be asked to serve.
const (
	EndpointChat        = "/v1/chat/completions"
	EndpointCompletions = "/v1/completions"
	EndpointEmbeddings  = "/v1/embeddings"
)

// Request is one validated request of a batch.
type Request struct {
	// CustomID is the caller's id, for logs and request ids.
	CustomID string
	// Endpoint is one of the Endpoint constants.
	Endpoint string
	// Body is the request body as JSON, already validated, with the batch-level
	// defaults merged in (per-request values win). Engines must not modify it.
	Body json.RawMessage
	// Stream, when set, is called with each piece of new output text of
	// choice as it is generated (the online endpoints' stream: true). An
	// engine that cannot stream ignores it; the pieces of a choice, in
	// order, are its final text. It must not block.
	Stream func(choice int, delta string)
	// Started, when set, is called by an engine.Queue once, just before
	// the request first enters the engine's computation (its first forward
	// pass), and never after its answer. A request that has not started
	// cannot have crashed the engine: the pipeline's crash-loop guard
	// counts only started requests as suspects. It must not block.
	Started func()
	// Priority orders the request's admission among those waiting for
	// the engine: higher first, the same in arrival order. An engine
	// never preempts running work for it and keeps a share of its
	// admissions for the lower ones, so none starves.
	Priority Priority
}

// Priority is a request's admission class (Request.Priority); the zero
// value is PriorityNormal.
type Priority int

// Priorities, lowest first: a batch's (options priority or service_tier)
// and the online endpoints', above every batch.
const (
	PriorityLow    Priority = -1
	PriorityNormal Priority = 0
	PriorityHigh   Priority = 1
	PriorityOnline Priority = 2
)

// String is the priority's name in options and logs.
func (p Priority) String() string {
	switch p {
	case PriorityLow:
		return "low"
	case PriorityNormal:
		return "normal"
	case PriorityHigh:
		return "high"
	case PriorityOnline:
		return "online"
	}
	return fmt.Sprintf("priority(%d)", int(p))
}

// PriorityShare is how many admissions in a row an engine gives to the
// highest priority waiting while lower ones wait: the next goes to the
// longest-waiting of the lower ones. A steady stream of online requests
// thus leaves batches at least one admission in PriorityShare+1.
const PriorityShare = 4

// Response is the model side's answer to one request: a success (2xx) or a
// refusal of that request (4xx other than 408/429), which the pipeline writes
// as that request's result or error line.
type Response struct {
	// StatusCode is the HTTP-like status: 200 for success, 4xx for a refusal.
	StatusCode int
	// RequestID identifies the attempt that answered (a server's x-request-id
	// when it gives one).
	RequestID string
	// Body is the endpoint's response body (chat.completion, text_completion,
	// embeddings list), or an OpenAI error object {"error":{...}} for a 4xx.
	// The pipeline checks it, whatever the engine: a body that is not a
	// JSON object in valid UTF-8, or a 2xx whose usage token counts are
	// not whole numbers from 0 to MaxInt64, fails the request with an
	// engine_bad_response error line instead of being written as given.
	Body json.RawMessage
}

// CodeEngineError is the error code of a request the engine failed on: a
// panic recovered at the request boundary, answered with a 500.
const CodeEngineError = "engine_error"

// Recovered is the answer to a request whose engine panicked with v: a 500
// with an OpenAI error body (server_error, engine_error). The request is
// not retried: a bug that fails it once fails it again, and retrying it
// after every restart is how one request would stop all the others.
func Recovered(v any) *Response {
	msg := fmt.Sprintf("The engine failed on this request (%v); it was not retried. This is a bug in batchd: please report it with the request.", v)
	return &Response{StatusCode: 500, Body: wire.NewError(wire.TypeServerError, msg, "", CodeEngineError).JSON()}
}

// ErrUnavailable is wrapped by the error Do returns when a request could not
// be answered after every retry it is allowed (see Engine). The pipeline
// turns it into an `engine_unavailable` error line for that request.
var ErrUnavailable = errors.New("engine unavailable")

// Engine runs requests.
//
// Contract:
//   - Do is safe for concurrent use and may block: an implementation bounds its
//     own in-flight work and, when it is wholly down or failing every request,
//     holds callers (pausing the batches) until it is back, rather than failing
//     them: an outage never ends a request with ErrUnavailable. That error is
//     for a request that fails on its own while the engine serves others, or
//     for a closed engine.
//   - Do returns exactly one of: a *Response (2xx, a 4xx refusal, or the 500
//     of Recovered for a request the engine failed on) and nil; an error
//     wrapping ErrUnavailable; or ctx.Err() once ctx is done.
//   - Do should not panic; callers recover a panic all the same and answer
//     that request with Recovered.
//   - Do never changes req.
type Engine interface {
	// Open starts the engine's background work (probes, model loading).
	Open(ctx context.Context) error
	// Do runs one request.
	Do(ctx context.Context, req *Request) (*Response, error)
	// Close stops background work and waits for it.
	Close(ctx context.Context) error
}

// Stats is an optional view an engine may offer for status and metrics.
type Stats struct {
	InFlight int   // requests being run now
	Paused   bool  // true while the engine is wholly down (callers held, or retrying with nothing answered yet)
	Hung     bool  // true while requests are sent but the engine has answered nothing for a while
	Retries  int64 // attempts that repeated an earlier one, so far
}

// StatsReporter is implemented by engines that can report Stats.
type StatsReporter interface {
	Stats() Stats
}

// ModelLister is implemented by engines that know the models they serve
// (GET /v1/models).
type ModelLister interface {
	Models() []string
}

// Queue is implemented by engines that take requests without a goroutine
// each: the pipeline hands such an engine as many requests as it asks for
// (Window), and the engine's own scheduler chooses what runs, so it can group
// shared prefixes across everything it holds.
//
// Contract, beside Engine's:
//   - Submit never blocks for long (at most for the work of accepting the
//     request: parsing, tokenizing). It calls done exactly once, from any
//     goroutine, with what Do would have returned for the same request;
//     done must not block.
//   - When ctx is done before the request is answered, done gets ctx.Err()
//     promptly and the request's resources are released.
//   - Submit calls req.Started, when set, before the request's first
//     computation (see Request.Started); work done inside Submit itself
//     (parsing, tokenizing) counts as started by the caller.
//   - Window is how many requests (running and waiting) the engine wants to
//     hold at once now; it may change as the engine learns its memory. A
//     caller keeps at most Window() submitted requests outstanding.
type Queue interface {
	Submit(ctx context.Context, req *Request, done func(*Response, error))
	Window() int
}

// EndpointResponses is OpenAI's Responses API, which the native engine runs
// as a chat completion (AsChat); the remote engine forwards it to servers
// with the route and runs it as a chat completion on others.
const EndpointResponses = wire.EndpointResponses

// AsChat is how an engine runs a /v1/responses request: the chat
// completions request it becomes (same custom_id, stream and started
// callbacks) and the function that turns that request's answer into the
// Response object; or, for a body that cannot run, its 400 answer.
func AsChat(req *Request) (chat *Request, answer func(*Response) *Response, refused *Response) {
	body, inv := wire.ResponsesToChat(req.Body)
	if inv != nil {
		return nil, nil, &Response{StatusCode: 400, Body: inv.Body()}
	}
	chat = &Request{CustomID: req.CustomID, Endpoint: EndpointChat, Body: body, Stream: req.Stream, Started: req.Started, Priority: req.Priority}
	answer = func(resp *Response) *Response {
		if resp == nil || resp.StatusCode != 200 {
			return resp
		}
		b, err := wire.ChatToResponse(req.Body, resp.Body)
		if err != nil {
			msg := fmt.Sprintf("The engine's chat completion cannot be a Response: %v", err)
			return &Response{StatusCode: 500, RequestID: resp.RequestID, Body: wire.NewError(wire.TypeServerError, msg, "", CodeEngineError).JSON()}
		}
		return &Response{StatusCode: resp.StatusCode, RequestID: resp.RequestID, Body: b}
	}
	return chat, answer, nil
}
