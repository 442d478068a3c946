package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

var (
	_ engine.Engine        = (*Router)(nil)
	_ engine.StatsReporter = (*Router)(nil)
	_ engine.ModelLister   = (*Router)(nil)
)

// CodeModelNotFound is the error code of a request naming a model that no
// route serves (404, as OpenAI answers it).
const CodeModelNotFound = "model_not_found"

// Router is the remote engine with routes (Config.Routes): it sends each
// request to the Engine of the route its body.model names, or to the
// default one (Config.URLs) when there is one, and refuses the request
// otherwise. Each route's Engine has its own pool, window, probes and
// outage detection: one route down holds only its own requests.
type Router struct {
	routes map[string]*Engine
	models []string // routed models, in config order
	dflt   *Engine  // Config.URLs' engine; nil without URLs
	all    []*Engine
}

// NewRouter checks cfg and builds a Router: an Engine per route (with the
// route's URLs and API key, and every other setting of cfg) and one for
// cfg.URLs when given. A cfg without routes gets a Router around one
// Engine. It does no I/O.
func NewRouter(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rt := &Router{routes: make(map[string]*Engine, len(cfg.Routes))}
	base := cfg
	base.Routes = nil
	if len(cfg.URLs) > 0 {
		e, err := New(base)
		if err != nil {
			return nil, err
		}
		rt.dflt = e
		rt.all = append(rt.all, e)
	}
	for i, r := range cfg.Routes {
		rc := base
		rc.URLs = r.URLs
		rc.Model = ""
		if r.APIKey != "" {
			rc.APIKey = r.APIKey
		}
		if cfg.Logger != nil {
			rc.Logger = cfg.Logger.With("route", r.Model)
		}
		e, err := New(rc)
		if err != nil {
			return nil, fmt.Errorf("openai.routes[%d]: %w", i, err)
		}
		rt.routes[r.Model] = e
		rt.models = append(rt.models, r.Model)
		rt.all = append(rt.all, e)
	}
	return rt, nil
}

// Open opens every route's engine; when one fails, those opened are closed.
func (rt *Router) Open(ctx context.Context) error {
	for i, e := range rt.all {
		if err := e.Open(ctx); err != nil {
			for _, o := range rt.all[:i] {
				_ = o.Close(ctx)
			}
			return err
		}
	}
	return nil
}

// Close closes every route's engine.
func (rt *Router) Close(ctx context.Context) error {
	var errs []error
	for _, e := range rt.all {
		errs = append(errs, e.Close(ctx))
	}
	return errors.Join(errs...)
}

// Do sends req to its route's engine (see Router), or answers it with a
// refusal: 404 model_not_found for a model no route serves, 400 for a
// request naming none, each naming the served models.
func (rt *Router) Do(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	e, refusal := rt.route(req.Body)
	if refusal != nil {
		refusal.RequestID = requestID(req.Endpoint, req.CustomID)
		return refusal, nil
	}
	return e.Do(ctx, req)
}

// route picks the engine for a body, or the refusal of it.
func (rt *Router) route(body json.RawMessage) (*Engine, *engine.Response) {
	var b struct {
		Model *string `json:"model"`
	}
	// A body that does not decode routes as naming no model: the default
	// engine, if any, refuses it as it always has.
	_ = json.Unmarshal(body, &b)
	if b.Model != nil {
		if e, ok := rt.routes[*b.Model]; ok {
			return e, nil
		}
	}
	if rt.dflt != nil {
		return rt.dflt, nil
	}
	served := strings.Join(rt.models, ", ")
	if b.Model == nil || *b.Model == "" {
		return nil, &engine.Response{StatusCode: http.StatusBadRequest, Body: wire.NewError(wire.TypeInvalidRequest,
			fmt.Sprintf(`the request names no model and the remote engine routes by model (%s): give body.model, or the batch a default model ("model" in its options)`, served),
			"model", wire.CodeMissingRequiredParameter).JSON()}
	}
	return nil, &engine.Response{StatusCode: http.StatusNotFound, Body: wire.NewError(wire.TypeInvalidRequest,
		fmt.Sprintf("The model %q is not served; served models: %s", *b.Model, served),
		"model", CodeModelNotFound).JSON()}
}

// Models returns the routed models, and the default engine's
// Config.Model when it sets one.
func (rt *Router) Models() []string {
	out := slices.Clone(rt.models)
	if rt.dflt != nil && rt.dflt.cfg.Model != "" && !slices.Contains(out, rt.dflt.cfg.Model) {
		out = append(out, rt.dflt.cfg.Model)
	}
	return out
}

// Stats sums the routes' requests in flight and retries; the engine counts
// as paused or hung while any route is, though the others go on serving.
func (rt *Router) Stats() engine.Stats {
	var st engine.Stats
	for _, e := range rt.all {
		s := e.Stats()
		st.InFlight += s.InFlight
		st.Retries += s.Retries
		st.Paused = st.Paused || s.Paused
		st.Hung = st.Hung || s.Hung
	}
	return st
}
