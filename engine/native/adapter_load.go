package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/internal/fsx"
)

// Adapters a request brings with body.lora_path (a requests document's
// available_lora_weights) load on first use: off the step loop, at most
// once per name however many requests ask at once (they wait for the same
// load and get its result), kept for the runner's life. A failed load is
// forgotten, so a later request tries again. One name is one adapter: a
// name is never bound to a second path, which keeps the prefix cache's key
// (the adapter's name, sequence.go) one adapter's.

// adapterLoad is a load in flight: the requests waiting for it run (or
// are refused) when it ends.
type adapterLoad struct {
	path    string // the adapter's real path
	waiters []func(*adapter, *engine.Response)
}

// adapterByName returns r's loaded adapter called name, or nil.
func (r *runner) adapterByName(name string) *adapter {
	r.amu.Lock()
	defer r.amu.Unlock()
	return r.adapters[name]
}

// dynamicAdapter resolves p.loraName with p.loraPath on r: an adapter
// already loaded under that name from the same file, or a load of it. Then
// exactly one of cont's calls follows: now, before it returns, or from the
// load's goroutine.
func (r *runner) dynamicAdapter(p *params, cont func(*adapter, *engine.Response)) {
	if p.loraName == "" {
		cont(nil, badRequest("lora_path: requires lora_name, the name the adapter is known by", "lora_path", "invalid_value"))
		return
	}
	root := r.e.cfg.AdapterRoot
	real, resp := resolveAdapterPath(root, p.loraName, p.loraPath)
	r.amu.Lock()
	if a := r.adapters[p.loraName]; a != nil {
		r.amu.Unlock()
		if resp == nil && real == a.path {
			cont(a, nil)
			return
		}
		// Compare with the path as written when it cannot be resolved
		// under the root (a configured adapter, with adapter_root unset).
		if resp != nil && samePath(p.loraPath, a.path) {
			cont(a, nil)
			return
		}
		cont(nil, badRequest(fmt.Sprintf("lora_name: the LoRA adapter %q is already loaded for model %q from %s, and this request's lora_path is %q: one name is one adapter, so give this adapter another name",
			p.loraName, r.name, a.path, p.loraPath), "lora_name", "invalid_value"))
		return
	}
	if resp != nil {
		r.amu.Unlock()
		cont(nil, resp)
		return
	}
	if l := r.loading[p.loraName]; l != nil {
		if l.path != real {
			r.amu.Unlock()
			cont(nil, badRequest(fmt.Sprintf("lora_name: the LoRA adapter %q is being loaded for model %q from %s, and this request's lora_path is %q: one name is one adapter, so give this adapter another name",
				p.loraName, r.name, l.path, p.loraPath), "lora_name", "invalid_value"))
			return
		}
		l.waiters = append(l.waiters, cont)
		r.amu.Unlock()
		return
	}
	if n, limit := len(r.adapters)+len(r.loading), r.e.cfg.MaxAdapters; n >= limit {
		r.amu.Unlock()
		cont(nil, badRequest(fmt.Sprintf("lora_name: cannot load the LoRA adapter %q: model %q already has %d adapters loaded or loading, native.max_adapters is %d: raise native.max_adapters",
			p.loraName, r.name, n, limit), "lora_name", "lora_limit"))
		return
	}
	l := &adapterLoad{path: real, waiters: []func(*adapter, *engine.Response){cont}}
	r.loading[p.loraName] = l
	r.amu.Unlock()
	go r.loadDynamic(p.loraName, l)
}

// loadDynamic loads l's adapter, publishes it under name, and answers
// l's waiters.
func (r *runner) loadDynamic(name string, l *adapterLoad) {
	if hook := r.e.adapterLoadHook; hook != nil {
		hook(name)
	}
	a, err := r.model.loadAdapter(name, l.path)
	var resp *engine.Response
	r.amu.Lock()
	delete(r.loading, name)
	if err == nil {
		a.path = l.path
		r.adapters[name] = a
	}
	waiters := l.waiters
	l.waiters = nil
	r.amu.Unlock()
	if err != nil {
		r.e.log.Warn("lora adapter load failed", "model", r.name, "adapter", name, "path", l.path, "err", err)
		resp = badRequest(fmt.Sprintf("lora_path: the LoRA adapter %q at %s cannot be loaded: %v", name, l.path, err),
			"lora_path", "invalid_lora_adapter")
		a = nil
	} else {
		r.e.log.Info("lora adapter loaded", "model", r.name, "adapter", name, "path", l.path, "rank", a.rank, "on", "first use")
	}
	for _, w := range waiters {
		w(a, resp)
	}
}

// resolveAdapterPath resolves loc, a request's lora_path, inside root: the
// adapter's real path (symlinks followed), or the 400 that says why not.
// A PEFT directory's files must lie inside root too.
func resolveAdapterPath(root, name, loc string) (string, *engine.Response) {
	notFound := func(why string) (string, *engine.Response) {
		return "", badRequest(fmt.Sprintf("lora_name: the LoRA adapter %q (lora_path %q) %s", name, loc, why), "lora_name", "lora_not_found")
	}
	if root == "" {
		return notFound("cannot be loaded: native.adapter_root is not set; set native.adapter_root to the directory holding the adapters to load them on first use, or configure the adapter in native.models[].adapters")
	}
	realRoot, rel, err := fsx.Under(root, loc)
	switch {
	case errors.Is(err, fsx.ErrOutsideRoot):
		return notFound(fmt.Sprintf("is outside native.adapter_root %s (symlinks followed); only adapters under adapter_root are loaded", root))
	case errors.Is(err, os.ErrNotExist):
		return notFound(fmt.Sprintf("was not found under native.adapter_root %s", root))
	case err != nil:
		return notFound(fmt.Sprintf("cannot be resolved under native.adapter_root %s: %v", root, err))
	}
	real := filepath.Join(realRoot, rel)
	if st, err := os.Stat(real); err == nil && st.IsDir() {
		for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
			if _, _, err := fsx.Under(realRoot, filepath.Join(rel, f)); errors.Is(err, fsx.ErrOutsideRoot) {
				return notFound(fmt.Sprintf("has %s outside native.adapter_root %s (symlinks followed); only adapters under adapter_root are loaded", f, root))
			}
		}
	}
	return real, nil
}

// samePath reports whether loc, resolved as written, is the file at real.
func samePath(loc, real string) bool {
	r, err := filepath.EvalSymlinks(loc)
	return err == nil && r == real
}
