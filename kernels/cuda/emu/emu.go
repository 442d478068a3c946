// Package emu runs batchd's CUDA kernels on the host: a cuda.Driver whose
// kernels are the csrc/ CUDA C compiled as C++ with -DBATCHD_EMU, every CUDA
// thread a fiber of csrc/emu.h's runtime. It is the test double for the GPU
// that CI and most machines lack: the same kernels, launched by name with
// the same []cuda.Arg, with barriers, shuffles and shared memory meaning
// what they mean on the GPU. Gemm is a plain host loop, the double for
// cuBLASLt.
//
// Open compiles a harness (clang-19, clang++ or g++, or the compiler
// BATCHD_EMU_CXX names; cached under the user's cache directory) and runs it
// as a subprocess spoken to over a pipe. Launches run to completion before
// Launch returns; a kernel that faults kills the harness, and the error
// (with the harness's stderr, which names the kernel) is returned by that
// call and every later one.
package emu

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"sync"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
)

var _ cuda.Driver = (*Driver)(nil)

// Options configure Open.
type Options struct {
	// Memory is the device memory MemInfo reports and Alloc enforces; 0
	// means 1 GiB.
	Memory int64
	// Arch is the compute capability Arch reports; 0 means 90.
	Arch int
}

// The requests of the pipe protocol (csrc/emu/harness.cpp).
const (
	opAlloc uint8 = iota + 1
	opFree
	opMemset
	opCopyIn
	opCopyOut
	opLaunch
	opGemm
	opSync
)

// Driver is a cuda.Driver on the host harness process.
type Driver struct {
	opts    Options
	kernels map[string]kernel

	mu     sync.Mutex
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	w      *bufio.Writer
	r      *bufio.Reader
	stderr *tailBuffer
	dead   error // set once the harness is gone

	allocs    map[cuda.DevPtr]int64
	used      int64
	capturing *graph
}

// Open builds (or finds cached) and starts the harness with default
// Options.
func Open() (*Driver, error) { return OpenOptions(Options{}) }

// OpenOptions builds (or finds cached) and starts the harness.
func OpenOptions(o Options) (*Driver, error) {
	if o.Memory == 0 {
		o.Memory = 1 << 30
	}
	if o.Arch == 0 {
		o.Arch = 90
	}
	ks, err := parseKernels(sources)
	if err != nil {
		return nil, fmt.Errorf("emu: %w", err)
	}
	bin, err := build(sources, ks)
	if err != nil {
		return nil, fmt.Errorf("emu: %w", err)
	}
	d := &Driver{opts: o, kernels: map[string]kernel{}, allocs: map[cuda.DevPtr]int64{}, stderr: &tailBuffer{max: 8 << 10}}
	for _, k := range ks {
		d.kernels[k.name] = k
	}
	d.cmd = exec.Command(bin)
	d.cmd.Stderr = d.stderr
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("emu: %w", err)
	}
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("emu: %w", err)
	}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("emu: start harness: %w", err)
	}
	d.w = bufio.NewWriterSize(d.stdin, 1<<16)
	d.r = bufio.NewReaderSize(out, 1<<16)
	if err := d.Sync(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Name implements cuda.Driver.
func (d *Driver) Name() string { return "emulated CUDA (host fibers)" }

// Arch implements cuda.Driver.
func (d *Driver) Arch() int { return d.opts.Arch }

// MemInfo reports Options.Memory as the total, less what is allocated.
func (d *Driver) MemInfo() (free, total int64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.opts.Memory - d.used, d.opts.Memory, nil
}

// Alloc implements cuda.Driver; past Options.Memory it fails with
// kernels.ErrDeviceMemory.
func (d *Driver) Alloc(n int64) (cuda.DevPtr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.notCapturing("Alloc"); err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("emu: alloc of %d bytes", n)
	}
	if d.used+n > d.opts.Memory {
		return 0, fmt.Errorf("emu: alloc of %d bytes with %d of %d in use: %w", n, d.used, d.opts.Memory, kernels.ErrDeviceMemory)
	}
	var resp [8]byte
	if err := d.call("alloc", func() { d.req(opAlloc, uint64(n)) }, resp[:]); err != nil {
		return 0, err
	}
	p := cuda.DevPtr(binary.LittleEndian.Uint64(resp[:]))
	d.allocs[p] = n
	d.used += n
	return p, nil
}

// Free implements cuda.Driver; freeing what Alloc did not return is
// ignored, as freeing zero is.
func (d *Driver) Free(p cuda.DevPtr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := d.allocs[p]
	if !ok {
		return
	}
	delete(d.allocs, p)
	d.used -= n
	_ = d.call("free", func() { d.req(opFree, uint64(p)) }, nil)
}

// Memset implements cuda.Driver.
func (d *Driver) Memset(p cuda.DevPtr, n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkRange("memset", p, n); err != nil {
		return err
	}
	return d.call("memset", func() { d.req(opMemset, uint64(p), uint64(n)) }, nil)
}

// CopyIn implements cuda.Driver.
func (d *Driver) CopyIn(dst cuda.DevPtr, src []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkRange("copy in", dst, int64(len(src))); err != nil {
		return err
	}
	return d.call("copy in", func() {
		d.req(opCopyIn, uint64(dst), uint64(len(src)))
		d.w.Write(src)
	}, nil)
}

// CopyOut implements cuda.Driver.
func (d *Driver) CopyOut(dst []byte, src cuda.DevPtr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkRange("copy out", src, int64(len(dst))); err != nil {
		return err
	}
	return d.call("copy out", func() { d.req(opCopyOut, uint64(src), uint64(len(dst))) }, dst)
}

// Launch implements cuda.Driver: it runs the kernel to completion before
// returning (the emulation has one stream and no asynchrony).
func (d *Driver) Launch(name string, grid, block cuda.Dim3, shared uint32, args ...cuda.Arg) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := launch{name: name, grid: grid, block: block, shared: shared, args: append([]cuda.Arg(nil), args...)}
	if err := d.checkLaunch(l); err != nil {
		return err
	}
	if d.capturing != nil {
		d.capturing.ops = append(d.capturing.ops, l)
		return nil
	}
	return d.launch(l)
}

// Gemm implements cuda.Driver with a plain float32 loop over k in order:
// the test double for cuBLASLt.
func (d *Driver) Gemm(g cuda.Gemm) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkGemm(g); err != nil {
		return err
	}
	if d.capturing != nil {
		d.capturing.ops = append(d.capturing.ops, g)
		return nil
	}
	return d.gemm(g)
}

// Sync implements cuda.Driver: a round trip to the harness.
func (d *Driver) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.notCapturing("Sync"); err != nil {
		return err
	}
	return d.call("sync", func() { d.req(opSync) }, nil)
}

// graph is a captured list of launch and cuda.Gemm values.
type graph struct {
	d   *Driver
	ops []any
}

// Destroy implements cuda.Graph.
func (g *graph) Destroy() { g.ops = nil }

type launch struct {
	name        string
	grid, block cuda.Dim3
	shared      uint32
	args        []cuda.Arg
}

// Capture implements cuda.Driver: fn's launches and GEMMs are checked and
// recorded, not run.
func (d *Driver) Capture(fn func() error) (cuda.Graph, error) {
	g := &graph{d: d}
	d.mu.Lock()
	if d.capturing != nil {
		d.mu.Unlock()
		return nil, errors.New("emu: capture inside a capture")
	}
	d.capturing = g
	d.mu.Unlock()
	err := fn()
	d.mu.Lock()
	d.capturing = nil
	d.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("emu: capture: %w", err)
	}
	return g, nil
}

// Replay implements cuda.Driver.
func (d *Driver) Replay(cg cuda.Graph) error {
	g, ok := cg.(*graph)
	if !ok || g.d != d {
		return errors.New("emu: replay of a graph this driver did not capture")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.notCapturing("Replay"); err != nil {
		return err
	}
	for i, op := range g.ops {
		var err error
		switch op := op.(type) {
		case launch:
			err = d.launch(op)
		case cuda.Gemm:
			err = d.gemm(op)
		}
		if err != nil {
			return fmt.Errorf("emu: replay step %d: %w", i, err)
		}
	}
	return nil
}

// Close stops the harness and waits for it.
func (d *Driver) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	if d.dead == nil {
		d.stdin.Close() // the harness exits at end of input
		d.cmd.Wait()
		d.dead = errors.New("emu: driver closed")
	}
}

func (d *Driver) notCapturing(op string) error {
	if d.capturing != nil {
		return fmt.Errorf("emu: %s during Capture (a captured function may only Launch and Gemm)", op)
	}
	return nil
}

// checkRange refuses a copy or memset outside one live allocation, which
// would otherwise crash the harness or corrupt it silently.
func (d *Driver) checkRange(op string, p cuda.DevPtr, n int64) error {
	if err := d.notCapturing(op); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if err := d.checkRangeAny(p, n); err != nil {
		return fmt.Errorf("emu: %s: %w", op, err)
	}
	return nil
}

func (d *Driver) checkLaunch(l launch) error {
	k, ok := d.kernels[l.name]
	if !ok {
		return fmt.Errorf("emu: launch %s: no such kernel in csrc/batchd.cu", l.name)
	}
	if len(l.args) != len(k.params) {
		return fmt.Errorf("emu: launch %s: %d arguments, the kernel (%s) takes %d", l.name, len(l.args), k.file, len(k.params))
	}
	for i, a := range l.args {
		if p := k.params[i]; a.Size != p.size {
			return fmt.Errorf("emu: launch %s: argument %d (%s %s) is %d bytes, the kernel takes %d", l.name, i, p.ctype, p.name, a.Size, p.size)
		}
	}
	for _, v := range []uint32{l.grid.X, l.grid.Y, l.grid.Z, l.block.X, l.block.Y, l.block.Z} {
		if v == 0 || v > math.MaxInt32 {
			return fmt.Errorf("emu: launch %s: grid %v block %v: every dimension must be at least 1", l.name, l.grid, l.block)
		}
	}
	return nil
}

func (d *Driver) checkGemm(g cuda.Gemm) error {
	if g.M <= 0 || g.N <= 0 || g.K <= 0 || g.M > math.MaxInt32 || g.N > math.MaxInt32 || g.K > math.MaxInt32 {
		return fmt.Errorf("emu: gemm %dx%dx%d: every size must be positive", g.M, g.N, g.K)
	}
	if g.Type < cuda.ElemF32 || g.Type > cuda.ElemBF16 {
		return fmt.Errorf("emu: gemm: operand type %v", g.Type)
	}
	es := int64(g.Type.Size())
	for _, r := range []struct {
		name string
		p    cuda.DevPtr
		n    int64
	}{{"x", g.X, int64(g.M) * int64(g.K) * es}, {"W", g.W, int64(g.N) * int64(g.K) * es}, {"out", g.Out, int64(g.M) * int64(g.N) * 4}} {
		if err := d.checkRangeAny(r.p, r.n); err != nil {
			return fmt.Errorf("emu: gemm %dx%dx%d: %s: %w", g.M, g.N, g.K, r.name, err)
		}
	}
	return nil
}

func (d *Driver) checkRangeAny(p cuda.DevPtr, n int64) error {
	for base, size := range d.allocs {
		if p >= base && uint64(p)-uint64(base) <= uint64(size) && n <= size-int64(p-base) {
			return nil
		}
	}
	return fmt.Errorf("%d bytes at %#x are not inside one allocation", n, uint64(p))
}

func (d *Driver) launch(l launch) error {
	k := d.kernels[l.name]
	return d.call("launch "+l.name, func() {
		d.req(opLaunch)
		d.u32(k.index, l.grid.X, l.grid.Y, l.grid.Z, l.block.X, l.block.Y, l.block.Z, l.shared, uint32(len(l.args)))
		for _, a := range l.args {
			d.u64(a.Bits & (1<<(8*uint(a.Size)) - 1))
		}
	}, nil)
}

func (d *Driver) gemm(g cuda.Gemm) error {
	return d.call("gemm", func() {
		d.req(opGemm)
		d.u32(uint32(g.M), uint32(g.N), uint32(g.K), uint32(g.Type))
		d.u64(uint64(g.W), uint64(g.X), uint64(g.Out))
	}, nil)
}

func (d *Driver) req(op uint8, fields ...uint64) {
	d.w.WriteByte(op)
	d.u64(fields...)
}

func (d *Driver) u64(vs ...uint64) {
	for _, v := range vs {
		d.w.Write(binary.LittleEndian.AppendUint64(nil, v))
	}
}

func (d *Driver) u32(vs ...uint32) {
	for _, v := range vs {
		d.w.Write(binary.LittleEndian.AppendUint32(nil, v))
	}
}

// call sends one request (written by send) and reads its reply into resp.
// A broken pipe means the harness died: the error says so with its stderr,
// and every later call returns it.
func (d *Driver) call(what string, send func(), resp []byte) error {
	if d.dead != nil {
		return d.dead
	}
	send()
	if err := d.w.Flush(); err != nil {
		return d.died(what, err)
	}
	status, err := d.r.ReadByte()
	if err != nil {
		return d.died(what, err)
	}
	if status != 0 {
		var n [4]byte
		if _, err := io.ReadFull(d.r, n[:]); err != nil {
			return d.died(what, err)
		}
		msg := make([]byte, binary.LittleEndian.Uint32(n[:]))
		if _, err := io.ReadFull(d.r, msg); err != nil {
			return d.died(what, err)
		}
		return fmt.Errorf("emu: %s: %s", what, msg)
	}
	if _, err := io.ReadFull(d.r, resp); err != nil {
		return d.died(what, err)
	}
	return nil
}

func (d *Driver) died(what string, err error) error {
	d.cmd.Process.Kill()
	werr := d.cmd.Wait()
	d.dead = fmt.Errorf("emu: %s: the harness died (%v, %v); its stderr ends:\n%s", what, err, werr, d.stderr.String())
	return d.dead
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
