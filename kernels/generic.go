package kernels

import (
	"encoding/binary"
	"math"
)

// portable is the pure-Go backend: always built, the reference the SIMD
// backends are tested against, and what runs where no SIMD path exists.
var portable = &backend{
	name:        "generic",
	matmul:      genericMatMul,
	quantizeAct: genericQuantizeAct,
	dot:         genericDot,
	rmsnorm:     genericRMSNorm,
	rope:        genericRoPE,
	siluMul:     genericSiLUMul,
	attention:   genericAttention,
	softmax:     genericSoftmax,
	add:         genericAdd,
	argmax:      genericArgmax,
}

func genericMatMul(a *mmArgs, w *worker, r0, r1, t0, t1 int) {
	m := a.w
	rows, cols := m.Rows, m.Cols
	if m.Type == Q8_0 {
		for r := r0; r < r1; r++ {
			wrow := m.Data[r*a.rb : (r+1)*a.rb]
			for t := t0; t < t1; t++ {
				qs, xs := a.act.row(t)
				a.out[t*rows+r] = genericDotQ8(wrow, qs, xs, a.act.nb)
			}
		}
		return
	}
	w.f32 = growF32(w.f32, cols)
	row := w.f32
	for r := r0; r < r1; r++ {
		m.Row(r, row)
		for t := t0; t < t1; t++ {
			a.out[t*rows+r] = genericDot(a.x[t*cols:(t+1)*cols], row)
		}
	}
}

// genericDotQ8 is one Q8_0 weight row against one quantized activation row:
// an exact int32 sum per block, then acc += sum·(dw·dx) in float32.
func genericDotQ8(wrow, qs []byte, xs []float32, nb int) float32 {
	var acc float32
	wrow, qs = wrow[:nb*Q8BlockBytes], qs[:nb*Q8BlockSize]
	for b := range nb {
		blk := wrow[b*Q8BlockBytes : (b+1)*Q8BlockBytes]
		dw := f16Table[binary.LittleEndian.Uint16(blk)]
		wq := (*[Q8BlockSize]byte)(blk[2:])
		xq := (*[Q8BlockSize]byte)(qs[b*Q8BlockSize:])
		var s0, s1, s2, s3 int32
		for i := 0; i < Q8BlockSize; i += 4 {
			s0 += int32(int8(wq[i])) * int32(int8(xq[i]))
			s1 += int32(int8(wq[i+1])) * int32(int8(xq[i+1]))
			s2 += int32(int8(wq[i+2])) * int32(int8(xq[i+2]))
			s3 += int32(int8(wq[i+3])) * int32(int8(xq[i+3]))
		}
		dx := xs[(b>>1)*16+(b&1)*8]
		acc += float32((s0+s1)+(s2+s3)) * (dw * dx)
	}
	return acc
}

// genericQuantizeAct quantizes one activation row: per block d = max|x|/127
// (kept in float32), q = x·(1/d) rounded to nearest even.
func genericQuantizeAct(qs []byte, xs []float32, x []float32) {
	nb := len(x) / Q8BlockSize
	for b := range nb {
		blk := x[b*Q8BlockSize : (b+1)*Q8BlockSize]
		var amax float32
		for _, v := range blk {
			amax = max(amax, abs32(v))
		}
		d, id := q8Scale(amax)
		q := qs[b*Q8BlockSize : (b+1)*Q8BlockSize]
		for i, v := range blk {
			q[i] = byte(int8(math.RoundToEven(float64(v * id))))
		}
		s := xs[(b>>1)*16+(b&1)*8:][:8]
		for i := range s {
			s[i] = d
		}
	}
	if nb&1 == 1 {
		clear(qs[nb*Q8BlockSize : (nb+1)*Q8BlockSize])
		clear(xs[(nb>>1)*16+8 : (nb>>1)*16+16])
	}
}

// q8Scale returns a block's scale and its reciprocal (0 for an all-zero block).
func q8Scale(amax float32) (d, id float32) {
	d = amax / 127
	if d != 0 {
		id = 1 / d
	}
	return d, id
}

func genericDot(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= n; i += 8 {
		x, y := (*[8]float32)(a[i:]), (*[8]float32)(b[i:])
		s0 += x[0] * y[0]
		s1 += x[1] * y[1]
		s2 += x[2] * y[2]
		s3 += x[3] * y[3]
		s4 += x[4] * y[4]
		s5 += x[5] * y[5]
		s6 += x[6] * y[6]
		s7 += x[7] * y[7]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func genericRMSNorm(out, x, weight []float32, eps float32) {
	n := len(x)
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	scale := rmsScale(ss, n, eps)
	out, weight = out[:n], weight[:n]
	for i, v := range x {
		out[i] = float32(v*scale) * weight[i]
	}
}

// rmsScale is 1/sqrt(mean(x²)+eps), the mean and the epsilon in float32 as
// Hugging Face computes them, the square root in float64.
func rmsScale(ss float32, n int, eps float32) float32 {
	return float32(1 / math.Sqrt(float64(ss/float32(n)+eps)))
}

func genericRoPE(x []float32, heads, headDim, pairs int, c, s []float32, neox bool) {
	for h := range heads {
		v := x[h*headDim : (h+1)*headDim]
		if neox {
			half := pairs
			for i := range pairs {
				x0, x1 := v[i], v[i+half]
				v[i] = float32(x0*c[i]) - float32(x1*s[i])
				v[i+half] = float32(x0*s[i]) + float32(x1*c[i])
			}
			continue
		}
		for i := range pairs {
			x0, x1 := v[2*i], v[2*i+1]
			ci, si := c[2*i], s[2*i+1]
			v[2*i] = float32(x0*ci) - float32(x1*si)
			v[2*i+1] = float32(x0*si) + float32(x1*ci)
		}
	}
}

func genericSiLUMul(gate, up []float32) {
	up = up[:len(gate)]
	for i, g := range gate {
		gate[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

func genericAttention(a *attnArgs, w *worker, i, h0, h1 int) {
	for h := h0; h < h1; h++ {
		genericAttentionHead(a, w, i, h)
	}
}

func genericAttentionHead(a *attnArgs, w *worker, i, h int) {
	hd := a.headDim
	n := a.start + i + 1
	g := h / (a.nHeads / a.nKV)
	q := a.q[(i*a.nHeads+h)*hd:][:hd]
	lo := a.first(n)
	scores := w.scores[lo:n]
	for j := range scores {
		scores[j] = genericDot(q, a.kRow(lo+j, g)) * a.scale
	}
	a.capScores(scores)
	m := scores[0]
	for _, s := range scores[1:] {
		m = max(m, s)
	}
	if a.sinks != nil { // one more score, in the softmax only
		m = max(m, a.sinks[h])
	}
	var sum float32
	for p, s := range scores {
		e := float32(math.Exp(float64(s - m)))
		scores[p] = e
		sum += e
	}
	if a.sinks != nil {
		sum += float32(math.Exp(float64(a.sinks[h] - m)))
	}
	o := a.out[(i*a.nHeads+h)*hd:][:hd]
	clear(o)
	for j, e := range scores {
		v := a.vRow(lo+j, g)
		for d := range o {
			o[d] += e * v[d]
		}
	}
	inv := 1 / sum
	for d := range o {
		o[d] *= inv
	}
}

func genericSoftmax(x []float32) {
	if len(x) == 0 {
		return
	}
	m := x[0]
	for _, v := range x[1:] {
		m = max(m, v)
	}
	var sum float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		sum += e
	}
	inv := 1 / sum
	for i := range x {
		x[i] *= inv
	}
}

func genericAdd(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

func genericArgmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
