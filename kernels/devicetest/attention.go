package devicetest

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/batchd/batchd/kernels"
)

// attnShape is one attention problem: a sequence of n positions.
type attnShape struct {
	n, nHeads, nKV, headDim int
	scale                   float32
}

// refAttention is the float64 attention of queries q ([nTok][nHeads][hd],
// positions start..start+nTok-1) over the rows k and v ([pos][nKV·hd]) of
// positions 0..start+nTok-1, with o's variants, and each output's
// tolerance under the package doc's policy.
func refAttention(s attnShape, q, k, v []float32, nTok, start int, o kernels.AttnOpts) (want, tol []float64) {
	hd, w := s.headDim, s.nKV*s.headDim
	group := s.nHeads / s.nKV
	want, tol = make([]float64, nTok*s.nHeads*hd), make([]float64, nTok*s.nHeads*hd)
	for i := range nTok {
		n := start + i + 1
		lo := 0
		if o.Window > 0 && n > o.Window {
			lo = n - o.Window
		}
		for h := range s.nHeads {
			g := h / group
			qh := q[(i*s.nHeads+h)*hd:][:hd]
			sc := make([]float64, n-lo)
			m := math.Inf(-1)
			for j := range sc {
				kr := k[(lo+j)*w+g*hd:][:hd]
				var dot float64
				for c := range hd {
					dot += float64(qh[c]) * float64(kr[c])
				}
				sc[j] = dot * float64(s.scale)
				if c := float64(o.SoftCap); c > 0 {
					sc[j] = c * math.Tanh(sc[j]/c)
				}
				m = max(m, sc[j])
			}
			if o.Sinks != nil {
				m = max(m, float64(o.Sinks[h]))
			}
			var sum float64
			for j := range sc {
				sc[j] = math.Exp(sc[j] - m)
				sum += sc[j]
			}
			if o.Sinks != nil {
				sum += math.Exp(float64(o.Sinks[h]) - m)
			}
			out := want[(i*s.nHeads+h)*hd:][:hd]
			ot := tol[(i*s.nHeads+h)*hd:][:hd]
			for j, e := range sc {
				vr := v[(lo+j)*w+g*hd:][:hd]
				for c := range hd {
					out[c] += e / sum * float64(vr[c])
					ot[c] += e / sum * math.Abs(float64(vr[c]))
				}
			}
			for c := range ot {
				ot[c] = ElemTol * (1 + ot[c])
			}
		}
	}
	return want, tol
}

// attend writes k and v ([n][nKV·hd]) into a fresh pool through a
// shuffled block table in chunks of chunk positions, attending each
// chunk's queries after its write (PagedAttentionOpts when o is not
// plain), and returns the outputs.
func attend(d *dev, s attnShape, table []int32, p kernels.KVPool, q, k, v kernels.Buf, chunk int, o kernels.AttnOpts) []float32 {
	qs, kvs := s.nHeads*s.headDim, s.nKV*s.headDim
	out := d.zeros(s.n * qs)
	for st := 0; st < s.n; st += chunk {
		c := min(chunk, s.n-st)
		d.d.WriteKV(p, k.Slice(st*kvs, c*kvs), v.Slice(st*kvs, c*kvs), table, st, c)
		oq, qq := out.Slice(st*qs, c*qs), q.Slice(st*qs, c*qs)
		if o.Plain() {
			d.d.PagedAttention(oq, qq, p, table, c, st, s.nHeads, s.nKV, s.headDim, s.scale)
		} else {
			d.d.(kernels.FamilyDevice).PagedAttentionOpts(oq, qq, p, table, c, st, s.nHeads, s.nKV, s.headDim, s.scale, o)
		}
	}
	return d.get(out)
}

// attnShapes: GQA and MHA, a sequence past one 64-position tile, a head
// no multiple of 32.
var attnShapes = []attnShape{
	{n: 17, nHeads: 6, nKV: 2, headDim: 16, scale: 0.25},
	{n: 70, nHeads: 2, nKV: 2, headDim: 40, scale: 0.2},
}

// checkAttention runs shape s with o against the reference, in one call
// and in chunks, the chunked results bit-identical to the whole.
func checkAttention(t *testing.T, d *dev, s attnShape, o kernels.AttnOpts, chunks []int) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(s.n), uint64(s.headDim)))
	const bs = 4
	blocks := (s.n + bs - 1) / bs
	qv := randVec(r, s.n*s.nHeads*s.headDim, 1)
	kv, vv := randVec(r, s.n*s.nKV*s.headDim, 1), randVec(r, s.n*s.nKV*s.headDim, 2)
	want, tol := refAttention(s, qv, kv, vv, s.n, 0, o)
	q, k, v := d.buf(qv), d.buf(kv), d.buf(vv)
	var whole []float32
	for _, chunk := range chunks {
		p := d.allocKV(blocks+3, bs, s.nKV*s.headDim)
		got := attend(d, s, shuffledTable(r, blocks, blocks+3), p, q, k, v, chunk, o)
		what := name("attention %d positions heads %d/%d headDim %d %+v", s.n, s.nHeads, s.nKV, s.headDim, o)
		if whole == nil {
			within(t, what, got, want, tol)
			whole = got
			continue
		}
		exact(t, name("%s in chunks of %d vs one call", what, chunk), got, whole)
	}
}

// testAttention: PagedAttention against the reference for each shape,
// whole and chunked; a query attends to nothing after its position.
func testAttention(t *testing.T, d *dev) {
	for _, s := range attnShapes {
		checkAttention(t, d, s, kernels.AttnOpts{}, []int{s.n, 5, 1})
	}
	// Causality: what follows a query's position changes nothing of it.
	s := attnShapes[0]
	r := rand.New(rand.NewPCG(7, 7))
	qv := randVec(r, s.n*s.nHeads*s.headDim, 1)
	kv, vv := randVec(r, s.n*s.nKV*s.headDim, 1), randVec(r, s.n*s.nKV*s.headDim, 1)
	table := shuffledTable(r, 5, 8)
	first := attend(d, s, table, d.allocKV(8, 4, s.nKV*s.headDim), d.buf(qv), d.buf(kv), d.buf(vv), s.n, kernels.AttnOpts{})
	last := (s.n - 1) * s.nKV * s.headDim
	for i := last; i < len(kv); i++ {
		kv[i], vv[i] = -kv[i], 3*vv[i]
	}
	second := attend(d, s, table, d.allocKV(8, 4, s.nKV*s.headDim), d.buf(qv), d.buf(kv), d.buf(vv), s.n, kernels.AttnOpts{})
	qs := s.nHeads * s.headDim
	exact(t, "attention before the changed last position", second[:(s.n-1)*qs], first[:(s.n-1)*qs])
	if slices.Equal(second[(s.n-1)*qs:], first[(s.n-1)*qs:]) {
		t.Fatal("changing the last position's K and V did not change its own attention")
	}
}

// testFamily: the FamilyDevice operations.
func testFamily(t *testing.T, d *dev) {
	fd := d.d.(kernels.FamilyDevice)
	r := rand.New(rand.NewPCG(8, 8))
	const n = 301
	x, y := randVec(r, n, 2), randVec(r, n, 2)
	x[0], y[0] = 1, 1

	b := d.buf(x)
	fd.GELUMul(b, d.buf(y))
	want := make([]float64, n)
	for i, v := range x {
		g := float64(v)
		want[i] = 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g))) * float64(y[i])
	}
	got := d.get(b)
	near(t, "GELUMul", got, want)
	if x[0] != 1 || y[0] != 1 {
		t.Fatal("the GELUMul inputs lost their known value")
	}
	if g := got[0]; math.Abs(float64(g)-0.8411920) > 1e-6 { // GELU(1), tanh approximation
		t.Fatalf("GELUMul(1, 1) = %v, want 0.8411920", g)
	}

	const alpha, limit = 1.702, 7
	g4, u4 := make([]float32, n), make([]float32, n)
	clamped := 0
	for i := range x {
		g4[i], u4[i] = 4*x[i], 4*y[i] // past the clamps
		g, u := min(float64(g4[i]), limit), max(min(float64(u4[i]), limit), -limit)
		if g == limit || math.Abs(u) == limit {
			clamped++
		}
		want[i] = g / (1 + math.Exp(-alpha*g)) * (u + 1)
	}
	if clamped == 0 {
		t.Fatal("no SwiGLUOAI input reaches a clamp")
	}
	b = d.buf(g4)
	fd.SwiGLUOAI(b, d.buf(u4), alpha, limit)
	near(t, "SwiGLUOAI", d.get(b), want)

	b = d.buf(x)
	fd.Scale(b, 11.3)
	scaled := make([]float32, n)
	for i, v := range x {
		scaled[i] = v * 11.3
	}
	exact(t, "Scale", d.get(b), scaled)

	b = d.buf(x)
	fd.SoftCap(b, 0.7)
	for i, v := range x {
		want[i] = 0.7 * math.Tanh(float64(v)/0.7)
	}
	near(t, "SoftCap", d.get(b), want)

	for _, s := range attnShapes {
		sinks := randVec(r, s.nHeads, 1)
		for _, o := range []kernels.AttnOpts{{Window: 1}, {Window: 6}, {SoftCap: 0.5}, {Window: 5, SoftCap: 0.3},
			{Sinks: sinks}, {Sinks: sinks, Window: 4}} {
			checkAttention(t, d, s, o, []int{s.n, 4, 1})
		}
	}
}
