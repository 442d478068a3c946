package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// benchMatrix fills a matrix quickly with plausible weights (|w| < ~0.1).
func benchMatrix(dt DType, rows, cols int) *Matrix {
	rb, _ := dt.RowBytes(cols)
	data := make([]byte, rows*rb)
	r := rand.New(rand.NewPCG(1, uint64(rows)))
	switch dt {
	case F32:
		for i := 0; i < len(data); i += 4 {
			binary.LittleEndian.PutUint32(data[i:], math.Float32bits(float32(int32(r.Uint32()))*0x1p-35))
		}
	case F16, BF16:
		conv := F32ToF16
		if dt == BF16 {
			conv = F32ToBF16
		}
		for i := 0; i < len(data); i += 2 {
			binary.LittleEndian.PutUint16(data[i:], conv(float32(int32(r.Uint32()))*0x1p-35))
		}
	case Q8_0:
		for i := 0; i < len(data); i += 8 {
			binary.LittleEndian.PutUint64(data[i:], r.Uint64())
		}
		for b := 0; b < len(data); b += Q8BlockBytes {
			binary.LittleEndian.PutUint16(data[b:], F32ToF16(0.001*(1+float32(b%7))))
		}
	}
	m, err := NewMatrix(dt, rows, cols, data)
	if err != nil {
		panic(err)
	}
	return m
}

// BenchmarkMatMul reports GB/s of weights streamed for T=1 (decode is
// memory-bound) and GFLOP/s (2·rows·cols·T) for larger T.
//
//	go test -run '^$' -bench 'MatMul' -benchtime 20x ./kernels/
func BenchmarkMatMul(b *testing.B) {
	shapes := [][2]int{{4864, 896}, {896, 4864}, {151936, 896}}
	cpu := NewCPU(0)
	defer cpu.Close()
	for _, dt := range allTypes {
		b.Run(dt.String(), func(b *testing.B) {
			for _, sh := range shapes {
				rows, cols := sh[0], sh[1]
				var m *Matrix
				b.Run(fmt.Sprintf("%dx%d", rows, cols), func(b *testing.B) {
					for _, T := range []int{1, 32, 256} {
						b.Run(fmt.Sprintf("T=%d", T), func(b *testing.B) {
							if m == nil {
								m = benchMatrix(dt, rows, cols)
							}
							r := rand.New(rand.NewPCG(2, 3))
							x := randF32(r, T*cols, 1)
							out := make([]float32, T*rows)
							cpu.MatMul(out, x, T, m) // warm up scratch
							b.ResetTimer()
							for range b.N {
								cpu.MatMul(out, x, T, m)
							}
							sec := b.Elapsed().Seconds() / float64(b.N)
							if T == 1 {
								b.ReportMetric(float64(len(m.Data))/sec/1e9, "GB/s")
							} else {
								b.ReportMetric(2*float64(rows)*float64(cols)*float64(T)/sec/1e9, "GFLOP/s")
							}
						})
					}
				})
				m = nil
			}
		})
	}
}

// BenchmarkAttention: one token attending to ctx positions (decode) and a
// 128-token prefill chunk, Qwen2.5-0.5B head shape (14 heads, 2 kv, 64 dims).
func BenchmarkAttention(b *testing.B) {
	const heads, kv, hd = 14, 2, 64
	cpu := NewCPU(0)
	defer cpu.Close()
	for _, tc := range []struct{ nTok, start int }{{1, 511}, {1, 4095}, {128, 384}} {
		b.Run(fmt.Sprintf("nTok=%d/start=%d", tc.nTok, tc.start), func(b *testing.B) {
			r := rand.New(rand.NewPCG(4, 5))
			n := tc.start + tc.nTok
			q := randF32(r, tc.nTok*heads*hd, 1)
			k, v := randF32(r, n*kv*hd, 1), randF32(r, n*kv*hd, 1)
			out := make([]float32, len(q))
			cpu.Attention(out, q, k, v, tc.nTok, tc.start, heads, kv, hd, 0.125)
			b.ResetTimer()
			for range b.N {
				cpu.Attention(out, q, k, v, tc.nTok, tc.start, heads, kv, hd, 0.125)
			}
		})
	}
}

func BenchmarkRMSNorm(b *testing.B) {
	cpu := NewCPU(0)
	defer cpu.Close()
	for _, T := range []int{1, 256} {
		b.Run(fmt.Sprintf("T=%d", T), func(b *testing.B) {
			r := rand.New(rand.NewPCG(6, 7))
			x, w := randF32(r, T*896, 1), randF32(r, 896, 1)
			out := make([]float32, len(x))
			b.SetBytes(int64(4 * len(x)))
			for range b.N {
				cpu.RMSNorm(out, x, w, 896, 1e-6)
			}
		})
	}
}

func BenchmarkRoPE(b *testing.B) {
	cpu := NewCPU(0)
	defer cpu.Close()
	invFreq := make([]float32, 32)
	for i := range invFreq {
		invFreq[i] = float32(math.Pow(1e6, -float64(2*i)/64))
	}
	for _, T := range []int{1, 256} {
		for _, neox := range []bool{false, true} {
			b.Run(fmt.Sprintf("T=%d/neox=%v", T, neox), func(b *testing.B) {
				x := randF32(rand.New(rand.NewPCG(8, 9)), T*14*64, 1)
				pos := make([]int32, T)
				for i := range pos {
					pos[i] = int32(100 + i)
				}
				b.SetBytes(int64(4 * len(x)))
				for range b.N {
					cpu.RoPE(x, T, 14, 64, pos, invFreq, neox)
				}
			})
		}
	}
}

func BenchmarkSiLUMul(b *testing.B) {
	cpu := NewCPU(0)
	defer cpu.Close()
	for _, T := range []int{1, 256} {
		b.Run(fmt.Sprintf("T=%d", T), func(b *testing.B) {
			r := rand.New(rand.NewPCG(10, 11))
			g, u := randF32(r, T*4864, 2), randF32(r, T*4864, 1)
			g0 := append([]float32(nil), g...)
			b.SetBytes(int64(8 * len(g)))
			for range b.N {
				copy(g, g0)
				cpu.SiLUMul(g, u)
			}
		})
	}
}

func BenchmarkSoftmax(b *testing.B) {
	x := randF32(rand.New(rand.NewPCG(12, 13)), 151936, 3)
	x0 := append([]float32(nil), x...)
	b.SetBytes(int64(4 * len(x)))
	for range b.N {
		copy(x, x0)
		Softmax(x)
	}
}

func BenchmarkArgmax(b *testing.B) {
	x := randF32(rand.New(rand.NewPCG(14, 15)), 151936, 3)
	b.SetBytes(int64(4 * len(x)))
	for range b.N {
		Argmax(x)
	}
}

func BenchmarkDot(b *testing.B) {
	r := rand.New(rand.NewPCG(16, 17))
	x, y := randF32(r, 4096, 1), randF32(r, 4096, 1)
	b.SetBytes(int64(8 * len(x)))
	for range b.N {
		Dot(x, y)
	}
}

func BenchmarkAdd(b *testing.B) {
	r := rand.New(rand.NewPCG(18, 19))
	x, y := randF32(r, 896, 1), randF32(r, 896, 1)
	b.SetBytes(int64(8 * len(x)))
	for range b.N {
		Add(x, y)
	}
}

// BenchmarkPoolOverhead is the cost of one parallel-for with trivial work.
func BenchmarkPoolOverhead(b *testing.B) {
	cpu := NewCPU(0)
	defer cpu.Close()
	fn := func(int, int, int) {}
	for range b.N {
		cpu.pool.run(cpu.Threads()*4, 1, fn)
	}
}

// BenchmarkMatMulPaths compares the code paths this build can run on one
// shape (MatMul uses the best; this forces each).
//
//	GOEXPERIMENT=simd go test -run '^$' -bench MatMulPaths ./kernels/
func BenchmarkMatMulPaths(b *testing.B) {
	const rows, cols = 4864, 896
	for _, be := range backendsUnderTest(b) {
		cpu := newCPU(0, be)
		for _, dt := range allTypes {
			m := benchMatrix(dt, rows, cols)
			for _, T := range []int{1, 32} {
				b.Run(fmt.Sprintf("%s/%v/T=%d", be.name, dt, T), func(b *testing.B) {
					x := randF32(rand.New(rand.NewPCG(2, 3)), T*cols, 1)
					out := make([]float32, T*rows)
					cpu.MatMul(out, x, T, m)
					b.ResetTimer()
					for range b.N {
						cpu.MatMul(out, x, T, m)
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					if T == 1 {
						b.ReportMetric(float64(len(m.Data))/sec/1e9, "GB/s")
					} else {
						b.ReportMetric(2*float64(rows*cols*T)/sec/1e9, "GFLOP/s")
					}
				})
			}
		}
		cpu.Close()
	}
}
