package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/wire"
)

// modelLog records the body.model of every POST a stand-in gets.
type modelLog struct {
	mu     sync.Mutex
	models []string
}

func (l *modelLog) fault(_ int64, _ *http.Request, body []byte) openaitest.Fault {
	var b struct{ Model string }
	_ = json.Unmarshal(body, &b)
	l.mu.Lock()
	l.models = append(l.models, b.Model)
	l.mu.Unlock()
	return openaitest.Fault{}
}

func (l *modelLog) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.models)
}

// newTestRouter is newTestEngine for a Router.
func newTestRouter(t *testing.T, cfg Config) (*Router, *logStore) {
	t.Helper()
	logs := &logStore{}
	cfg.Logger = slog.New(&logHandler{store: logs})
	rt, err := NewRouter(cfg)
	if err != nil {
		t.Fatalf("NewRouter: %v", err)
	}
	openForTest(t, rt, logs)
	return rt, logs
}

func modelRequest(customID, model string) *engine.Request {
	body, _ := json.Marshal(map[string]any{
		"model":    model,
		"messages": []map[string]string{{"role": "user", "content": "hi " + customID}},
	})
	return &engine.Request{CustomID: customID, Endpoint: engine.EndpointChat, Body: body}
}

func TestRouterContract(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		def := startServer(t, openaitest.Options{})
		other := startServer(t, openaitest.Options{})
		cfg := testConfig(def.URL())
		cfg.Routes = []Route{{Model: "other", URLs: []string{other.URL()}}}
		cfg.Logger = slogDiscard
		rt, err := NewRouter(cfg)
		if err != nil {
			t.Fatalf("NewRouter: %v", err)
		}
		return rt
	})
}

// Requests naming different models each reach their route's server, with
// the model as given; one naming a model no route serves is refused with
// model_not_found naming the served models, and one naming none with a
// 400; neither reaches a server.
func TestRouterSendsEachModelToItsServers(t *testing.T) {
	var logA, logB modelLog
	a := startServer(t, openaitest.Options{Fault: logA.fault})
	b := startServer(t, openaitest.Options{Fault: logB.fault})
	cfg := testConfig()
	cfg.Routes = []Route{{Model: "model-a", URLs: []string{a.URL()}}, {Model: "model-b", URLs: []string{b.URL()}}}
	rt, _ := newTestRouter(t, cfg)
	if got := rt.Models(); !slices.Equal(got, []string{"model-a", "model-b"}) {
		t.Errorf("Models() = %v", got)
	}

	var wg sync.WaitGroup
	resps := make([]*engine.Response, 6)
	errs := make([]error, 6)
	models := []string{"model-a", "model-b", "model-a", "model-b", "gpt-4", ""}
	for i, m := range models {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
			defer cancel()
			resps[i], errs[i] = rt.Do(ctx, modelRequest(fmt.Sprint("r", i), m))
		})
	}
	wg.Wait()
	for i, m := range models[:4] {
		if errs[i] != nil || resps[i].StatusCode != 200 {
			t.Fatalf("%s: %v %+v", m, errs[i], resps[i])
		}
		var c wire.ChatCompletion
		if err := json.Unmarshal(resps[i].Body, &c); err != nil || c.Model != m {
			t.Errorf("%s: answered by model %q (%v)", m, c.Model, err)
		}
	}
	if got := logA.seen(); !slices.Equal(got, []string{"model-a", "model-a"}) {
		t.Errorf("server a got models %v", got)
	}
	if got := logB.seen(); !slices.Equal(got, []string{"model-b", "model-b"}) {
		t.Errorf("server b got models %v", got)
	}
	for i, want := range []struct {
		status int
		code   string
		text   string
	}{
		{404, CodeModelNotFound, `The model "gpt-4" is not served; served models: model-a, model-b`},
		{400, wire.CodeMissingRequiredParameter, "names no model"},
	} {
		r := resps[4+i]
		if errs[4+i] != nil || r.StatusCode != want.status || r.RequestID == "" {
			t.Fatalf("%q: %v %+v", models[4+i], errs[4+i], r)
		}
		var eb wire.ErrorBody
		if err := json.Unmarshal(r.Body, &eb); err != nil || eb.Error.Code == nil || *eb.Error.Code != want.code ||
			!contains(eb.Error.Message, want.text) || eb.Error.Param == nil || *eb.Error.Param != "model" {
			t.Errorf("%q: %s (%v)", models[4+i], r.Body, err)
		}
	}
}

// With openai.urls beside the routes, a model no route names goes there,
// with openai.model replacing it when set; routed models keep theirs.
func TestRouterDefaultTakesOtherModels(t *testing.T) {
	var logD, logA modelLog
	d := startServer(t, openaitest.Options{Fault: logD.fault})
	a := startServer(t, openaitest.Options{Fault: logA.fault})
	cfg := testConfig(d.URL())
	cfg.Model = "served-default"
	cfg.Routes = []Route{{Model: "model-a", URLs: []string{a.URL()}}}
	rt, _ := newTestRouter(t, cfg)
	for _, m := range []string{"gpt-4", "", "model-a"} {
		ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
		resp, err := rt.Do(ctx, modelRequest("x", m))
		cancel()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%q: %v %+v", m, err, resp)
		}
	}
	if got := logD.seen(); !slices.Equal(got, []string{"served-default", "served-default"}) {
		t.Errorf("default server got %v", got)
	}
	if got := logA.seen(); !slices.Equal(got, []string{"model-a"}) {
		t.Errorf("route server got %v", got)
	}
	if got := rt.Models(); !slices.Equal(got, []string{"model-a", "served-default"}) {
		t.Errorf("Models() = %v", got)
	}
}

// One route's servers going down holds its requests only: the other
// route's are answered meanwhile, and the held one is once its servers are
// back.
func TestRouterOutageHoldsOnlyItsRoute(t *testing.T) {
	a := startServer(t, openaitest.Options{})
	b := startServer(t, openaitest.Options{})
	cfg := testConfig()
	cfg.DownAfter = 2
	cfg.Routes = []Route{{Model: "model-a", URLs: []string{a.URL()}}, {Model: "model-b", URLs: []string{b.URL()}}}
	rt, logs := newTestRouter(t, cfg)
	paused := logs.waitFor("remote engine unreachable; batches paused, probing")
	b.Stop()

	held := make(chan *engine.Response, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		resp, err := rt.Do(ctx, modelRequest("held", "model-b"))
		if err != nil {
			t.Errorf("held request: %v", err)
		}
		held <- resp
	}()
	wait(t, paused, "route b going down")
	if w := logs.find("remote engine unreachable; batches paused, probing"); len(w) != 1 || w[0].attrs["route"] != "model-b" {
		t.Errorf("outage warnings = %v, want one for route model-b", w)
	}
	if !rt.Stats().Paused {
		t.Error("Stats().Paused = false while route model-b is down")
	}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
		resp, err := rt.Do(ctx, modelRequest(fmt.Sprint("a", i), "model-a"))
		cancel()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("model-a during b's outage: %v %+v", err, resp)
		}
	}
	select {
	case resp := <-held:
		t.Fatalf("model-b answered while its server was down: %+v", resp)
	default:
	}
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	if resp := <-held; resp == nil || resp.StatusCode != 200 {
		t.Fatalf("held request after restart: %+v", resp)
	}
}

func TestValidateRoutes(t *testing.T) {
	base := DefaultConfig()
	for _, tc := range []struct {
		name   string
		routes []Route
		want   string
	}{
		{"no model", []Route{{URLs: []string{"http://a/v1"}}}, "openai.routes[0].model: required"},
		{"twice", []Route{{Model: "m", URLs: []string{"http://a/v1"}}, {Model: "m", URLs: []string{"http://b/v1"}}}, `openai.routes[1].model: "m" is routed twice`},
		{"no urls", []Route{{Model: "m"}}, `openai.routes[0].urls: at least one base URL is required for model "m"`},
		{"bad url", []Route{{Model: "m", URLs: []string{"http://a/v1", "ftp://b"}}}, "openai.routes[0].urls[1]: base URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.Routes = tc.routes
			if err := c.Validate(); err == nil || !contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	c := base
	c.Routes = []Route{{Model: "m", URLs: []string{"http://a/v1"}}}
	if err := c.Validate(); err != nil {
		t.Errorf("routes without urls: %v", err)
	}
	if _, err := New(c); err == nil || !contains(err.Error(), "NewRouter") {
		t.Errorf("New with routes = %v, want a refusal naming NewRouter", err)
	}
}
