package native

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/tokenizer"
	"github.com/batchd/batchd/wire"
)

// Pooling methods for embeddings.
const (
	PoolMean = "mean"
	PoolLast = "last"
	PoolCLS  = "cls"
)

type embedBody struct {
	Input          json.RawMessage `json:"input"`
	Dimensions     *int            `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
}

// embeddings answers /v1/embeddings: each input is run through the model,
// its final hidden states pooled (mean, or the last token for models
// trained that way), L2-normalized, and optionally truncated to dimensions
// and renormalized.
func (r *runner) embeddings(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	if e := wire.CheckNativeBody(req.Endpoint, req.Body); e != nil {
		return refuse(e), nil
	}
	var b embedBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		return badRequest("body is not a valid request: "+err.Error(), "", "invalid_json"), nil
	}
	prompts, err := parsePrompts(b.Input)
	if err != nil {
		return badRequest("input must be a string, an array of strings or token ids", "input", "invalid_type"), nil
	}
	dim := r.model.cfg.Dim
	if b.Dimensions != nil && (*b.Dimensions < 1 || *b.Dimensions > dim) {
		return badRequest(fmt.Sprintf("dimensions must be between 1 and %d for this model", dim), "dimensions", "invalid_value"), nil
	}
	switch b.EncodingFormat {
	case "", "float", "base64":
	default:
		return badRequest(`encoding_format must be "float" or "base64"`, "encoding_format", "invalid_value"), nil
	}
	var out []wire.Embedding
	total := 0
	var s scratch
	for i, p := range prompts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ids := embedIDs(r.tok, p)
		if len(ids) == 0 {
			return badRequest(fmt.Sprintf("input %d is empty", i), "input", "invalid_value"), nil
		}
		if ctxLen := r.model.cfg.ContextLength; ctxLen > 0 && len(ids) > ctxLen {
			return badRequest(fmt.Sprintf("input %d has %d tokens; this model's maximum context length is %d tokens", i, len(ids), ctxLen), "input", "context_length_exceeded"), nil
		}
		if resp := r.checkIDs(ids, "input"); resp != nil {
			return resp, nil
		}
		total += len(ids)
		h, failed := r.embed(ids, &s)
		if failed != nil {
			failed.RequestID = requestID(req)
			return failed, nil
		}
		v := pool(h, len(ids), dim, r.pooling)
		if b.Dimensions != nil {
			v = v[:*b.Dimensions]
		}
		normalize(v)
		var emb any = v
		if b.EncodingFormat == "base64" {
			raw := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(raw)
		}
		out = append(out, wire.Embedding{Object: wire.ObjectEmbedding, Index: i, Embedding: emb})
	}
	body := wire.EmbeddingList{Object: wire.ObjectList, Data: out, Model: r.name,
		Usage: wire.EmbeddingUsage{PromptTokens: total, TotalTokens: total}}
	raw, _ := json.Marshal(body)
	return &engine.Response{StatusCode: 200, RequestID: requestID(req), Body: raw}, nil
}

// embedIDs is the token ids an embeddings input runs as: its own ids, or
// its text encoded with the model's special tokens (BOS), exactly as batchd
// stats counts it (PromptCounter).
func embedIDs(tok *tokenizer.Tokenizer, p promptInput) []int32 {
	if p.ids != nil {
		return p.ids
	}
	return tok.Encode(p.text, true, false)
}

// embed runs ids through the model under the compute lock. A panic in it
// fails this request alone with a 500 (engine_error), as in the
// scheduler (fault.go).
func (r *runner) embed(ids []int32, s *scratch) (h []float32, failed *engine.Response) {
	r.e.compute.Lock()
	defer r.e.compute.Unlock()
	defer func() {
		if v := recover(); v != nil {
			v, stack := panicDetails(v)
			r.e.log.Error("engine failed an embeddings request: panic in its forward pass", "model", r.name, "panic", fmt.Sprint(v), "stack", string(stack))
			failed = engine.Recovered(v)
		}
	}()
	if h := faultHook.Load(); h != nil {
		(*h)(ids)
	}
	return r.model.embed(ids, s), nil
}

// pool reduces [n][dim] hidden states to one vector.
func pool(h []float32, n, dim int, method string) []float32 {
	v := make([]float32, dim)
	switch method {
	case PoolLast:
		copy(v, h[(n-1)*dim:n*dim])
		return v
	case PoolCLS:
		copy(v, h[:dim])
		return v
	}
	for t := range n {
		for j := range dim {
			v[j] += h[t*dim+j]
		}
	}
	for j := range v {
		v[j] /= float32(n)
	}
	return v
}

func normalize(v []float32) {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if ss == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(ss))
	for i := range v {
		v[i] *= inv
	}
}
