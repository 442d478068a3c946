// Command loragguf writes a random LoRA adapter in llama.cpp's GGUF form
// (general.type adapter, tensors blk.N.*.weight.lora_a/lora_b) for a model
// file, so that scripts/llamacpp/bench.mjs can measure llama.cpp's adapter
// path beside `batchd bench engine --lora-rank`. A benchmark aid only.
//
// usage: go run ./scripts/llamacpp/loragguf MODEL.gguf RANK OUT.gguf
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/gguf"
	"github.com/batchd/batchd/engine/native/weights"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "loragguf:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: loragguf MODEL.gguf RANK OUT.gguf")
	}
	r, err := strconv.Atoi(args[1])
	if err != nil || r < 1 {
		return fmt.Errorf("rank %q: not a positive integer", args[1])
	}
	w, err := weights.Load(args[0])
	if err != nil {
		return err
	}
	defer w.Close()
	rng := demomodel.Rand(7)
	var ts []gguf.TensorData
	for li := range w.Config.Layers {
		for _, t := range weights.LoRATargets {
			name := weights.BlockName(li, t.Suffix)
			m := w.Matrices[name]
			if m == nil {
				return fmt.Errorf("%s has no %s", args[0], name)
			}
			ts = append(ts,
				gguf.TensorData{Name: name + ".lora_a", Type: gguf.F32, Dims: []uint64{uint64(m.Cols), uint64(r)}, Data: rng.NormalF32(r*m.Cols, 0.05)},
				gguf.TensorData{Name: name + ".lora_b", Type: gguf.F32, Dims: []uint64{uint64(r), uint64(m.Rows)}, Data: rng.NormalF32(m.Rows*r, 0.01)})
		}
	}
	meta := []gguf.KV{
		{Key: "general.architecture", Value: gguf.MustValue("qwen2")},
		{Key: "general.type", Value: gguf.MustValue("adapter")},
		{Key: "adapter.type", Value: gguf.MustValue("lora")},
		{Key: "adapter.lora.alpha", Value: gguf.MustValue(float32(r))},
	}
	f, err := os.Create(args[2])
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	if err := gguf.Write(bw, meta, ts); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
