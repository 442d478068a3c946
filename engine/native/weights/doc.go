// Package weights loads a Llama-family model (llama, including Llama 2/3.x,
// TinyLlama, SmolLM2 and Mistral; qwen2; qwen3; Phi-3 (its fused matrices
// split into views at load); Gemma 2 and 3, whose
// differences are Config fields (GeGLU, post-norms, soft caps, sliding
// windows, local RoPE); the mixtures of experts qwen3moe, Mixtral and
// gpt-oss (sinks, biases, YaRN, the clamped SwiGLU),
// their experts one matrix each in Model.Experts) from
// a GGUF file or a
// Hugging Face directory (config.json + safetensors + tokenizer.json) into
// one shape, Model: a Config, the weights under canonical GGUF tensor names,
// a tokenizer description and the chat template.
//
// It owns: reading each format's hyperparameters, mapping tensor names,
// checking every tensor's presence, type and shape against the config, and
// the safetensors format (parser, mmap, writer for tests and tools). Weight
// matrices stay memory-mapped where the stored type is one the kernels run
// on (F32, F16, BF16 and every GGUF block format the kernels read); FP8
// checkpoints' F8_E4M3 matrices are dequantized to BF16 with their block
// scales (fp8.go); 1-D weights are converted to float32.
//
// It must import only engine/native/gguf and kernels from batchd.
package weights
