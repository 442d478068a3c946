package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/batchd/batchd/engine"
)

// responsesRoute is what an Engine learned of its servers' /v1/responses
// route: whether Responses requests are forwarded as they are, or
// translated to chat completions (engine.AsChat) and their answers back.
type responsesRoute struct {
	mu      sync.Mutex
	decided bool
	forward bool
	tried   time.Time // the latest probe that decided nothing
}

// routeAnswer is a server's answer to the route probe.
type routeAnswer int

const (
	routeUnknown routeAnswer = iota // no answer that says (a transport error, 5xx, 401, 403, 429)
	routeAbsent                     // 404, 405 or 501: the server has no such route
	routePresent                    // any other status: the route is there (a 2xx, or the 400 of the empty body)
)

// responsesForward reports whether this engine forwards /v1/responses
// requests as they are. It probes every replica once, at the first
// Responses request (POST {base}/v1/responses with an empty object, a body
// no server runs): forwarded when every replica has the route, else
// translated, as every replica must answer a request alike whichever one
// it is sent to. A probe that leaves a replica unknown (down, refusing the
// key) decides nothing: that request is translated and a later one, after
// the probe interval, probes again. The decision is logged at INFO, once,
// for each server.
func (e *Engine) responsesForward(ctx context.Context) bool {
	rr := &e.responses
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.decided {
		return rr.forward
	}
	if e.ctx.Err() != nil || !rr.tried.IsZero() && time.Since(rr.tried) < e.cfg.ProbeInterval {
		return false
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.ctx, cancel)()
	answers := make([]routeAnswer, len(e.pool.replicas))
	statuses := make([]string, len(e.pool.replicas))
	var wg sync.WaitGroup
	for i, r := range e.pool.replicas {
		wg.Go(func() { answers[i], statuses[i] = e.prober.probeResponses(ctx, r) })
	}
	wg.Wait()
	all := true
	for i, a := range answers {
		if a == routeUnknown {
			rr.tried = time.Now()
			e.logger.Debug("/v1/responses route probe decided nothing; translating to chat completions for now",
				keyURL, e.pool.replicas[i].logURL, "answer", statuses[i])
			return false
		}
		all = all && a == routePresent
	}
	rr.decided, rr.forward = true, all
	for i, r := range e.pool.replicas {
		switch {
		case all:
			e.logger.Info("remote server: /v1/responses forwarded", keyURL, r.logURL, "probe", statuses[i])
		case answers[i] == routeAbsent:
			e.logger.Info("remote server: /v1/responses translated to chat completions", keyURL, r.logURL,
				"probe", statuses[i], "why", "the server has no /v1/responses route")
		default:
			e.logger.Info("remote server: /v1/responses translated to chat completions", keyURL, r.logURL,
				"probe", statuses[i], "why", "another server of this engine has no /v1/responses route")
		}
	}
	return all
}

// probeResponses asks r whether it has POST /v1/responses, with a body
// that cannot run; the second value is what it answered, for the logs.
func (pr *prober) probeResponses(ctx context.Context, r *replica) (routeAnswer, string) {
	ctx, cancel := context.WithTimeout(ctx, pr.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpointURL(r.base, engine.EndpointResponses), bytes.NewReader([]byte(`{}`)))
	if err != nil {
		return routeUnknown, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	if pr.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+pr.apiKey)
	}
	resp, err := pr.client.Do(req)
	if err != nil {
		return routeUnknown, fmt.Sprintf("post %s/responses: %v", r.logURL, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	status := fmt.Sprintf("status %d", resp.StatusCode)
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return routeAbsent, status
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests, http.StatusRequestTimeout:
		return routeUnknown, status
	}
	if resp.StatusCode >= 500 {
		return routeUnknown, status
	}
	return routePresent, status
}

// forwardedResponses is a Responses body as forwarded: store false unless
// the body says otherwise (batchd keeps no responses, and asks no server
// to; a body with store true was refused already).
func forwardedResponses(body []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	if _, ok := m["store"]; ok {
		return body
	}
	m["store"] = json.RawMessage(`false`)
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}
