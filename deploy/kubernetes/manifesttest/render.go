// Package manifesttest renders batchd's kustomize overlays and checks every
// object against the Kubernetes API types (and prometheus-operator's and
// KEDA's), with unknown fields refused, without a cluster.
//
// It implements only the part of kustomize the overlays use: resources
// (files and directories), patches that are JSON 6902 operation lists with a
// target, and configMapGenerator from files with disableNameSuffixHash. A
// kustomization that uses anything else is refused by name, so what passes
// here is what `kubectl apply -k` renders.
package manifesttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"sigs.k8s.io/yaml"
)

// Object is one rendered object: its JSON and the file it came from.
type Object struct {
	Source string
	JSON   []byte
	Meta   struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
}

func (o *Object) String() string {
	return fmt.Sprintf("%s %s/%s (%s)", o.Meta.APIVersion, o.Meta.Kind, o.Meta.Metadata.Name, o.Source)
}

type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Path   string `json:"path"`
		Target struct {
			Group   string `json:"group"`
			Version string `json:"version"`
			Kind    string `json:"kind"`
			Name    string `json:"name"`
		} `json:"target"`
	} `json:"patches"`
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator"`
	GeneratorOptions *struct {
		DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
	} `json:"generatorOptions"`
}

// Render renders the kustomization in dir.
func Render(dir string) ([]*Object, error) {
	path := filepath.Join(dir, "kustomization.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kustomization: %w", err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		return nil, fmt.Errorf("%s: %w (only resources, patches, configMapGenerator and generatorOptions are implemented)", path, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return nil, fmt.Errorf("%s: apiVersion/kind %s/%s, want kustomize.config.k8s.io/v1beta1/Kustomization", path, k.APIVersion, k.Kind)
	}
	var objs []*Object
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%s: resource %q: %w", path, r, err)
		}
		var got []*Object
		if st.IsDir() {
			got, err = Render(p)
		} else {
			got, err = readObjects(p)
		}
		if err != nil {
			return nil, err
		}
		objs = append(objs, got...)
	}
	for _, g := range k.ConfigMapGenerator {
		if k.GeneratorOptions == nil || !k.GeneratorOptions.DisableNameSuffixHash {
			return nil, fmt.Errorf("%s: configMapGenerator %q: name hashes are not implemented; set generatorOptions.disableNameSuffixHash", path, g.Name)
		}
		data := map[string]string{}
		for _, f := range g.Files {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				return nil, fmt.Errorf("%s: configMapGenerator %q: %w", path, g.Name, err)
			}
			data[filepath.Base(f)] = string(b)
		}
		cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": g.Name}, "data": data}
		b, _ := json.Marshal(cm)
		o, err := newObject(path+": configMapGenerator", b)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	for _, p := range k.Patches {
		pp := filepath.Join(dir, p.Path)
		raw, err := os.ReadFile(pp)
		if err != nil {
			return nil, fmt.Errorf("%s: patch: %w", path, err)
		}
		js, err := yaml.YAMLToJSONStrict(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pp, err)
		}
		if !bytes.HasPrefix(bytes.TrimSpace(js), []byte("[")) {
			return nil, fmt.Errorf("%s: not a JSON 6902 operation list (strategic merge patches are not implemented)", pp)
		}
		patch, err := jsonpatch.DecodePatch(js)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pp, err)
		}
		t := p.Target
		apiVersion := t.Version
		if t.Group != "" {
			apiVersion = t.Group + "/" + t.Version
		}
		var hit *Object
		for _, o := range objs {
			if o.Meta.APIVersion == apiVersion && o.Meta.Kind == t.Kind && o.Meta.Metadata.Name == t.Name {
				if hit != nil {
					return nil, fmt.Errorf("%s: patch %s: target matches more than one object", path, p.Path)
				}
				hit = o
			}
		}
		if hit == nil {
			return nil, fmt.Errorf("%s: patch %s: no %s %s named %q", path, p.Path, apiVersion, t.Kind, t.Name)
		}
		opts := jsonpatch.NewApplyOptions()
		opts.SupportNegativeIndices = false
		out, err := patch.ApplyWithOptions(hit.JSON, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: applying to %s: %w", pp, hit, err)
		}
		hit.JSON = out
		hit.Source += " patched by " + pp
	}
	return objs, nil
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// readObjects reads the YAML documents of a file, refusing duplicate keys.
func readObjects(path string) ([]*Object, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	var objs []*Object
	for i, doc := range docSep.Split(string(raw), -1) {
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "" {
			continue // only comments
		}
		o, err := newObject(fmt.Sprintf("%s, document %d", path, i+1), js)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	return objs, nil
}

func newObject(source string, js []byte) (*Object, error) {
	o := &Object{Source: source, JSON: js}
	if err := json.Unmarshal(js, &o.Meta); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if o.Meta.APIVersion == "" || o.Meta.Kind == "" || o.Meta.Metadata.Name == "" {
		return nil, fmt.Errorf("%s: apiVersion, kind and metadata.name are required", source)
	}
	return o, nil
}
