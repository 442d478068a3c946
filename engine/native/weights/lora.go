package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// A LoRA adapter changes some of a model's projections W (out×in) to
// W + Scale·B·A, with A (Rank×in) and B (out×Rank). It comes as a PEFT
// directory (adapter_config.json with r, lora_alpha and target_modules,
// beside adapter_model.safetensors) or as one .safetensors file, whose rank
// is read from the tensors and whose alpha is the header metadata's
// "lora_alpha" when present, else the rank (Scale 1).

// LoRATargets are the PEFT module names an adapter may target, in the
// order the decoder runs them, each with its canonical block suffix.
var LoRATargets = []struct{ Module, Suffix string }{
	{"q_proj", sufQ}, {"k_proj", sufK}, {"v_proj", sufV}, {"o_proj", sufO},
	{"gate_proj", sufFFNGate}, {"up_proj", sufFFNUp}, {"down_proj", sufFFNDown},
}

// LoRAPair is one projection's low-rank update, in float32, row-major.
type LoRAPair struct {
	A []float32 // Rank × in
	B []float32 // out × Rank
}

// LoRA is a loaded adapter.
type LoRA struct {
	Path  string
	Rank  int
	Alpha float64
	// Scale multiplies B·A: Alpha/Rank (Alpha/√Rank with use_rslora).
	Scale float64
	// Pairs are the updates by the canonical name of the matrix they change
	// ("blk.3.attn_q.weight").
	Pairs map[string]LoRAPair
}

// maxAdapterConfig bounds adapter_config.json.
const maxAdapterConfig = 1 << 20

// maxLoRAValue bounds an adapter's weights and its lora_alpha: 65504, the
// largest float16. Adapters are trained and saved in 16 bits with weights
// of order 0.01–1 and alphas of 8–512; a value past the float16 range is
// no trained adapter, and such values (3e38, say) overflow float32 once
// scaled (alpha/r·B) or multiplied, which makes every logit NaN. With
// both bounded, alpha/r·B stays finite.
const maxLoRAValue = 65504

// checkAlpha refuses a lora_alpha that is not a number in (0, 65504].
func checkAlpha(a float64) error {
	if !(a > 0 && a <= maxLoRAValue) { // NaN fails both
		return fmt.Errorf("lora_alpha %v is not a number in (0, %d] (trained adapters use 8 to 512)", a, maxLoRAValue)
	}
	return nil
}

// peftConfig is what batchd reads of adapter_config.json; fields that would
// change the computation in a way batchd does not do are refused by name.
type peftConfig struct {
	PeftType      string          `json:"peft_type"`
	R             *int            `json:"r"`
	Alpha         *float64        `json:"lora_alpha"`
	TargetModules json.RawMessage `json:"target_modules"`
	UseRSLoRA     bool            `json:"use_rslora"`
	UseDoRA       bool            `json:"use_dora"`
	FanInFanOut   bool            `json:"fan_in_fan_out"`
	Bias          string          `json:"bias"`
	ModulesToSave json.RawMessage `json:"modules_to_save"`
	RankPattern   json.RawMessage `json:"rank_pattern"`
	AlphaPattern  json.RawMessage `json:"alpha_pattern"`
}

// loraTensorName matches an adapter tensor: optional "base_model.model."
// then "model.layers.N.<self_attn|mlp>.<module>.lora_<A|B>.weight".
var loraTensorName = regexp.MustCompile(`^(?:base_model\.model\.)?model\.layers\.(0|[1-9][0-9]{0,6})\.(?:self_attn|mlp)\.([a-z_]+)\.lora_(A|B)(?:\.default)?\.weight$`)

// LoadLoRA loads the adapter at path (a PEFT directory or a .safetensors
// file) for base, checking every tensor's name and shape against it.
func LoadLoRA(path string, base *Model) (*LoRA, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("lora adapter: %w", err)
	}
	l := &LoRA{Path: path}
	file := path
	var cfg *peftConfig
	if st.IsDir() {
		cfg = &peftConfig{}
		cfgPath := filepath.Join(path, "adapter_config.json")
		b, err := readLimited(cfgPath, maxAdapterConfig)
		if err != nil {
			return nil, fmt.Errorf("lora adapter %s: %w (a PEFT adapter directory holds adapter_config.json and adapter_model.safetensors)", path, err)
		}
		if err := json.Unmarshal(b, cfg); err != nil {
			return nil, invalid("lora adapter %s: %v", cfgPath, err)
		}
		if err := cfg.check(cfgPath); err != nil {
			return nil, err
		}
		file = filepath.Join(path, "adapter_model.safetensors")
		if _, err := os.Stat(file); err != nil {
			if _, berr := os.Stat(filepath.Join(path, "adapter_model.bin")); berr == nil {
				return nil, unsupported("lora adapter %s: only adapter_model.safetensors is read, not adapter_model.bin (convert it with safetensors)", path)
			}
			return nil, fmt.Errorf("lora adapter %s: %w", path, err)
		}
	}
	sf, err := openSafetensors(file)
	if err != nil {
		return nil, fmt.Errorf("lora adapter: %w", err)
	}
	defer sf.Close()
	if err := l.read(file, sf, base); err != nil {
		return nil, err
	}
	switch {
	case cfg != nil:
		if *cfg.R != l.Rank {
			return nil, invalid("lora adapter %s: adapter_config.json says r = %d but the tensors have rank %d", path, *cfg.R, l.Rank)
		}
		l.Alpha = *cfg.Alpha
	case sf.meta["lora_alpha"] != "":
		a, err := strconv.ParseFloat(sf.meta["lora_alpha"], 64)
		if err == nil {
			err = checkAlpha(a)
		}
		if err != nil {
			return nil, invalid("lora adapter %s: metadata lora_alpha %q is not a number in (0, %d] (trained adapters use 8 to 512)", file, sf.meta["lora_alpha"], maxLoRAValue)
		}
		l.Alpha = a
	default:
		l.Alpha = float64(l.Rank)
	}
	l.Scale = l.Alpha / float64(l.Rank)
	if cfg != nil && cfg.UseRSLoRA {
		l.Scale = l.Alpha / math.Sqrt(float64(l.Rank))
	}
	return l, nil
}

// check refuses what batchd cannot apply, naming the field.
func (c *peftConfig) check(path string) error {
	bad := func(format string, args ...any) error {
		return unsupported("lora adapter %s: %s", path, fmt.Sprintf(format, args...))
	}
	if c.PeftType != "" && c.PeftType != "LORA" {
		return bad("peft_type %q: only LORA adapters are supported", c.PeftType)
	}
	if c.R == nil || *c.R < 1 {
		return invalid("lora adapter %s: r must be a positive integer", path)
	}
	if c.Alpha == nil {
		return invalid("lora adapter %s: lora_alpha must be a positive number", path)
	}
	if err := checkAlpha(*c.Alpha); err != nil {
		return invalid("lora adapter %s: %v", path, err)
	}
	if c.UseDoRA {
		return bad("use_dora: DoRA adapters are not supported")
	}
	if c.FanInFanOut {
		return bad("fan_in_fan_out: only Linear (out×in) weights are supported")
	}
	if c.Bias != "" && c.Bias != "none" {
		return bad("bias %q: adapters with bias terms are not supported (bias must be none)", c.Bias)
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"modules_to_save", c.ModulesToSave}, {"rank_pattern", c.RankPattern}, {"alpha_pattern", c.AlphaPattern}} {
		if s := strings.TrimSpace(string(f.raw)); s != "" && s != "null" && s != "{}" && s != "[]" {
			return bad("%s: not supported (an adapter with one rank and alpha for every target, and no saved modules, is)", f.name)
		}
	}
	var mods []string
	if json.Unmarshal(c.TargetModules, &mods) == nil {
		for _, m := range mods {
			if !slices.ContainsFunc(LoRATargets, func(t struct{ Module, Suffix string }) bool { return t.Module == m }) {
				return bad("target_modules: %q is not supported (supported: %s)", m, loraModules())
			}
		}
	}
	return nil
}

func loraModules() string {
	var s []string
	for _, t := range LoRATargets {
		s = append(s, t.Module)
	}
	return strings.Join(s, ", ")
}

// read fills l.Rank and l.Pairs from sf's tensors.
func (l *LoRA) read(file string, sf *safetensorsFile, base *Model) error {
	type half struct {
		name string
		e    safeEntry
	}
	type key struct {
		canon string
		ab    string
	}
	found := map[key]half{}
	names := make([]string, 0, len(sf.tensors))
	for name := range sf.tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := loraTensorName.FindStringSubmatch(name)
		if m == nil {
			return unsupported("lora adapter %s: tensor %q: not a LoRA A/B weight of a decoder layer's projection (supported targets: %s)", file, name, loraModules())
		}
		layer, _ := strconv.Atoi(m[1])
		i := slices.IndexFunc(LoRATargets, func(t struct{ Module, Suffix string }) bool { return t.Module == m[2] })
		if i < 0 {
			return unsupported("lora adapter %s: tensor %q: target %q is not supported (supported: %s)", file, name, m[2], loraModules())
		}
		if layer >= base.Config.Layers {
			return invalid("lora adapter %s: tensor %q: layer %d, but the model has %d layers", file, name, layer, base.Config.Layers)
		}
		found[key{BlockName(layer, LoRATargets[i].Suffix), m[3]}] = half{name, sf.tensors[name]}
	}
	if len(found) == 0 {
		return invalid("lora adapter %s: no lora_A/lora_B tensors", file)
	}
	l.Pairs = map[string]LoRAPair{}
	var rankFrom string
	keys := make([]key, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return found[keys[i]].name < found[keys[j]].name })
	for _, k := range keys {
		if k.ab != "A" {
			if _, ok := found[key{k.canon, "A"}]; !ok {
				return invalid("lora adapter %s: tensor %q has no matching lora_A tensor", file, found[k].name)
			}
			continue
		}
		a := found[k]
		bn := strings.Replace(a.name, "lora_A", "lora_B", 1)
		b, ok := found[key{k.canon, "B"}]
		if !ok {
			return invalid("lora adapter %s: missing tensor %q (the lora_B of %q)", file, bn, a.name)
		}
		w := base.Matrices[k.canon]
		if w == nil {
			return invalid("lora adapter %s: tensor %q: the model has no %s", file, a.name, k.canon)
		}
		if len(a.e.Shape) != 2 || a.e.Shape[0] < 1 || a.e.Shape[1] != uint64(w.Cols) {
			return invalid("lora adapter %s: tensor %q has shape %s, want [r, %d] (the model's %s is %d×%d)", file, a.name, shapeText(a.e.Shape), w.Cols, k.canon, w.Rows, w.Cols)
		}
		r := int(a.e.Shape[0])
		if len(b.e.Shape) != 2 || b.e.Shape[0] != uint64(w.Rows) || b.e.Shape[1] != uint64(r) {
			return invalid("lora adapter %s: tensor %q has shape %s, want [%d, %d] (the model's %s is %d×%d, rank %d)", file, b.name, shapeText(b.e.Shape), w.Rows, r, k.canon, w.Rows, w.Cols, r)
		}
		if l.Rank == 0 {
			l.Rank, rankFrom = r, a.name
		} else if r != l.Rank {
			return unsupported("lora adapter %s: tensor %q has rank %d but %q has rank %d (one rank for every target is supported)", file, a.name, r, rankFrom, l.Rank)
		}
		var p LoRAPair
		var err error
		if p.A, err = loraFloats(a.e, r*w.Cols); err != nil {
			return fmt.Errorf("lora adapter %s: tensor %q: %w", file, a.name, err)
		}
		if p.B, err = loraFloats(b.e, w.Rows*r); err != nil {
			return fmt.Errorf("lora adapter %s: tensor %q: %w", file, b.name, err)
		}
		l.Pairs[k.canon] = p
	}
	return nil
}

// loraFloats converts an F32, F16 or BF16 tensor of n values to float32.
func loraFloats(e safeEntry, n int) ([]float32, error) {
	t, ok := safeDTypes[e.DType]
	if !ok {
		return nil, unsupported("dtype %s: adapter tensors must be F32, F16 or BF16", e.DType)
	}
	out, err := toFloat32(t, e.Data, n)
	if err != nil {
		return nil, err
	}
	for i, v := range out {
		if !(math.Abs(float64(v)) <= maxLoRAValue) { // NaN fails too
			return nil, errors.Join(ErrInvalid, fmt.Errorf("element %d is %v: adapter weights must be finite and at most %d in magnitude (the float16 range; trained adapters hold values of order 0.01 to 1)", i, v, maxLoRAValue))
		}
	}
	return out, nil
}

// shapeText writes a tensor shape as PyTorch's size: [2, 64].
func shapeText(shape []uint64) string {
	s := make([]string, len(shape))
	for i, d := range shape {
		s[i] = strconv.FormatUint(d, 10)
	}
	return "[" + strings.Join(s, ", ") + "]"
}
