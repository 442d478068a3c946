package daemon

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/batchd/batchd/wire"
)

// Anthropic's clients talk to /v1/messages: they send the key as
// x-api-key (access.api takes it as it takes a Bearer key) and read
// errors in Anthropic's shape, {"type":"error","error":{"type","message"}}.
// anthropicErrors gives them that shape for every error answer of
// /v1/messages, the key check's included; the message starts with the
// field it is about, and the OpenAI error's param and code stay beside it. Streams that fail after their start end
// with an Anthropic error event already (messageEvents.fail).
func anthropicErrors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != wire.EndpointMessages {
			h.ServeHTTP(w, r)
			return
		}
		aw := &anthropicWriter{ResponseWriter: w}
		h.ServeHTTP(aw, r)
		aw.finish()
	})
}

// anthropicErrorTypes are Anthropic's error types by HTTP status.
var anthropicErrorTypes = map[int]string{
	http.StatusBadRequest:            "invalid_request_error",
	http.StatusUnauthorized:          "authentication_error",
	http.StatusForbidden:             "permission_error",
	http.StatusNotFound:              "not_found_error",
	http.StatusRequestEntityTooLarge: "request_too_large",
	http.StatusTooManyRequests:       "rate_limit_error",
	http.StatusServiceUnavailable:    "overloaded_error",
}

// anthropicWriter holds back an error answer (status 400 and up) to
// rewrite it in finish; any other answer passes through as written.
type anthropicWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (a *anthropicWriter) WriteHeader(status int) {
	if a.status != 0 {
		return
	}
	a.status = status
	if status < 400 {
		a.ResponseWriter.WriteHeader(status)
	}
}

func (a *anthropicWriter) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.WriteHeader(http.StatusOK)
	}
	if a.status >= 400 {
		return a.body.Write(p)
	}
	return a.ResponseWriter.Write(p)
}

// Flush passes a stream's events on (an error answer is held whole).
func (a *anthropicWriter) Flush() {
	if a.status < 400 {
		if f, ok := a.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (a *anthropicWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// finish writes a held error answer in Anthropic's shape.
func (a *anthropicWriter) finish() {
	if a.status < 400 {
		return
	}
	var oe struct {
		Error struct {
			Message string          `json:"message"`
			Param   json.RawMessage `json:"param"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(a.body.Bytes(), &oe) != nil || oe.Error.Message == "" {
		oe.Error.Message = string(bytes.TrimSpace(a.body.Bytes()))
	}
	typ, ok := anthropicErrorTypes[a.status]
	if !ok {
		typ = "api_error"
	}
	e := map[string]any{"type": typ, "message": oe.Error.Message}
	var param string
	if json.Unmarshal(oe.Error.Param, &param) == nil && param != "" {
		// Anthropic's messages name the field ("max_tokens: Field
		// required"); OpenAI's keep it in param.
		e["param"] = param
		if !strings.HasPrefix(oe.Error.Message, param) {
			e["message"] = param + ": " + oe.Error.Message
		}
	}
	if len(oe.Error.Code) > 0 && string(oe.Error.Code) != "null" {
		e["code"] = oe.Error.Code
	}
	data, _ := json.Marshal(map[string]any{"type": "error", "error": e})
	h := a.ResponseWriter.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(data)+1))
	a.ResponseWriter.WriteHeader(a.status)
	a.ResponseWriter.Write(append(data, '\n'))
}
