//go:build goexperiment.simd && amd64

package kernels

import (
	"bufio"
	"bytes"
	"debug/elf"
	"debug/gosym"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"simd/archsimd"
)

// The archsimd kernels must not run a legacy-SSE instruction while the
// upper halves of the vector registers are dirty: on many x86 CPUs each
// such transition costs hundreds of cycles (see the "SSE/AVX transitions"
// section of BENCHMARKS.md: 2.6–3.3× on stories260K). Go compiles every
// scalar float operation, GetElem's move to a float register, MOVUPS
// zeroing and copies and the spill of a 128-bit value to legacy SSE, so the
// rule is easy to break without noticing: nothing but speed changes. This
// test disassembles the package's own functions in the test binary (GNU
// objdump, which decodes VEX and EVEX) and checks, walking each function's
// instructions in address order:
//   - no legacy-SSE instruction between a YMM/ZMM instruction and the next
//     VZEROUPPER (a call leaves the state as its callee returns it);
//   - every function that does not return an archsimd vector returns with
//     the state clean (its callers, in this package or not, run scalar code).
// The walk follows the layout, not the control flow: a guard, not a proof.

// sseCanary breaks the rule (a scalar float after 512-bit code): the test
// checks that the checker finds it. It is never called (it needs AVX-512).
//
//go:noinline
func sseCanary(x []float32) float32 {
	v := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Pointer(unsafe.SliceData(x))))
	return v.GetLo().GetLo().GetElem(0) * x[1]
}

func TestNoLegacySSEWhileVectorStateDirty(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the code check reads the whole test binary with objdump")
	}
	if raceEnabled {
		t.Skip("the race detector's instrumentation changes the code checked; CI runs this check without -race")
	}
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		if os.Getenv("BATCHD_REQUIRE_OBJDUMP") != "" {
			t.Fatal("BATCHD_REQUIRE_OBJDUMP is set but GNU objdump (binutils) is not on PATH")
		}
		t.Skip("GNU objdump (Debian's binutils) is not on PATH: the SSE/AVX transition check needs it")
	}
	// Taking its address links sseCanary into the test binary.
	if fn := runtime.FuncForPC(reflect.ValueOf(sseCanary).Pointer()); fn == nil || !strings.HasSuffix(fn.Name(), ".sseCanary") {
		t.Fatal("sseCanary is not in the binary")
	}
	names, vecResult := kernelFuncs(t)
	names = append(names, "sseCanary")
	vecResult["sseCanary"] = false
	funcs := disassemble(t, objdump, names)
	// (Functions inlined everywhere have no body of their own; these
	// kernels must be found, or the walk is not looking where it should.)
	for _, n := range []string{"avx512Attention", "avx2AttentionHead", "rmsNorm512", "avx2RMSNorm", "avx512Softmax", "avx512QuantizeAct", "f32Tile4x1", "q8Tile4x4", "avx2MatMulGo"} {
		if _, ok := funcs[n]; !ok {
			t.Errorf("%s not found in the test binary (%d functions found)", n, len(funcs))
		}
	}
	bad, reached := checkTransitions(funcs, vecResult)
	if reached < 0.8 {
		t.Errorf("the flow reached %.0f%% of the instructions: objdump's output is not parsed as expected", 100*reached)
	}
	if len(bad["sseCanary"]) == 0 {
		t.Fatalf("the checker does not flag sseCanary (found %d functions): it checks nothing", len(funcs))
	}
	delete(bad, "sseCanary")
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		t.Errorf("%s: %s", name, strings.Join(bad[name], "; "))
	}
	t.Logf("%d functions checked, %.0f%% of their instructions reached", len(funcs), 100*reached)
}

// kernelFuncs lists the package's non-test functions as the linker names
// them (f, T.f, (*T).f) and whether each returns an archsimd value. Build
// tags are ignored: a function of another platform's file is not in the
// binary, and disassemble finds only what is.
func kernelFuncs(t *testing.T) ([]string, map[string]bool) {
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	vec := map[string]bool{}
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatalf("parse the package: %v", err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				switch r := fd.Recv.List[0].Type.(type) {
				case *ast.StarExpr:
					name = fmt.Sprintf("(*%s).%s", r.X.(*ast.Ident).Name, name)
				case *ast.Ident:
					name = r.Name + "." + name
				}
			}
			returnsVec := false
			if fd.Type.Results != nil {
				for _, r := range fd.Type.Results.List {
					if sel, ok := r.Type.(*ast.SelectorExpr); ok && sel.X.(*ast.Ident).Name == "archsimd" {
						returnsVec = true
					}
				}
			}
			names = append(names, name)
			vec[name] = returnsVec
		}
	}
	return names, vec
}

const pkgPrefix = "github.com/batchd/batchd/kernels."

// disassemble returns the instructions (objdump's text after the address)
// of the named functions and of their closures (name.funcN), by name. The
// functions are found in the binary's pclntab (a test binary has no symbol
// table), call targets are given as names.
func disassemble(t *testing.T, objdump string, names []string) map[string][]insn {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatalf("open the test binary: %v", err)
	}
	defer f.Close()
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		t.Fatal("the test binary has no .gopclntab or .text section")
	}
	data, err := pcln.Data()
	if err != nil {
		t.Fatalf("read .gopclntab: %v", err)
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		t.Fatalf("read .gopclntab: %v", err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	owner := func(sym string) (string, bool) {
		n, ok := strings.CutPrefix(sym, pkgPrefix)
		if !ok {
			return "", false
		}
		if want[n] {
			return n, true
		}
		if i := strings.Index(n, ".func"); i > 0 && want[n[:i]] {
			return n, true
		}
		return "", false
	}
	var lo, hi uint64
	for _, fn := range tab.Funcs {
		if _, ok := owner(fn.Name); ok {
			if lo == 0 || fn.Entry < lo {
				lo = fn.Entry
			}
			hi = max(hi, fn.End)
		}
	}
	if lo == 0 {
		t.Fatal("no function of the package in the test binary's pclntab")
	}
	out, err := exec.Command(objdump, "-d", "--no-show-raw-insn", fmt.Sprintf("--start-address=%#x", lo), fmt.Sprintf("--stop-address=%#x", hi), exe).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	line := regexp.MustCompile(`^\s*([0-9a-f]+):\t(.*)$`)
	call := regexp.MustCompile(`^call\s+(?:0x)?([0-9a-f]+)\b`)
	funcs := map[string][]insn{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		addr, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil {
			continue
		}
		fn := tab.PCToFunc(addr)
		if fn == nil {
			continue
		}
		name, ok := owner(fn.Name)
		if !ok {
			continue
		}
		in := strings.TrimSpace(m[2])
		if c := call.FindStringSubmatch(in); c != nil {
			if to, err := strconv.ParseUint(c[1], 16, 64); err == nil {
				if g := tab.PCToFunc(to); g != nil {
					in = "call <" + g.Name + ">"
				}
			}
		}
		funcs[name] = append(funcs[name], insn{addr, in})
	}
	return funcs
}

var (
	// Legacy-SSE instructions Go emits for scalar floats, 128-bit moves and
	// zeroing (VEX forms start with v and are not listed).
	legacySSE  = regexp.MustCompile(`^(movss|movsd|movups|movaps|movdqu|movdqa|movd|movq|movlps|movhps|addss|addsd|subss|subsd|mulss|mulsd|divss|divsd|minss|minsd|maxss|maxsd|sqrtss|sqrtsd|ucomiss|ucomisd|comiss|comisd|cvtsi2ss|cvtsi2sd|cvtss2sd|cvtsd2ss|cvttss2si|cvttsd2si|pxor|xorps|xorpd|andps|andnps|orps|por|pand|roundss|roundsd)\s+.*%xmm`)
	wideVector = regexp.MustCompile(`^v[a-z0-9]+\s.*%[yz]mm`)
	callTarget = regexp.MustCompile(`^call <(.+)>`)
)

// insn is one instruction: its address and objdump's text.
type insn struct {
	addr uint64
	text string
}

var branch = regexp.MustCompile(`^(j[a-z]+)\s+(?:0x)?([0-9a-f]+)\b`)

// checkTransitions checks each function (see the test's comment) and
// returns the violations by function. vecResult says which functions
// return a vector (they may return dirty).
func checkTransitions(funcs map[string][]insn, vecResult map[string]bool) (map[string][]string, float64) {
	// A function returns dirty if some ret may be reached dirty; calls
	// leave the state as the callee returns it: iterate to a fixed point.
	retDirty := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for name, ins := range funcs {
			d, _, _ := flow(ins, retDirty)
			if d && !retDirty[name] {
				retDirty[name], changed = true, true
			}
		}
	}
	bad := map[string][]string{}
	reached, total := 0, 0
	for name, ins := range funcs {
		d, v, r := flow(ins, retDirty)
		reached, total = reached+r, total+len(ins)
		base := name
		if i := strings.Index(name, ".func"); i > 0 {
			base = name[:i]
		}
		if d && !vecResult[base] {
			v = append(v, "returns with the upper vector state dirty (end it with archsimd.ClearAVXUpperBits)")
		}
		if len(v) > 0 {
			bad[name] = v
		}
	}
	return bad, float64(reached) / float64(max(total, 1))
}

// flow propagates "the upper state may be dirty" over the function's
// control flow (direct jumps; an indirect one ends its path) from a clean
// entry, and returns whether some ret may be reached dirty and the
// legacy-SSE instructions that may run dirty, and how many instructions
// it reached (the trap padding between functions is never reached).
func flow(ins []insn, retDirty map[string]bool) (bool, []string, int) {
	at := make(map[uint64]int, len(ins))
	for i, in := range ins {
		at[in.addr] = i
	}
	dirtyIn := make([]bool, len(ins))
	seen := make([]bool, len(ins))
	work := []int{0}
	seen[0] = true
	retD := false
	var bad []string
	reach := func(i int, dirty bool) {
		if i < 0 || i >= len(ins) || seen[i] && (dirtyIn[i] || !dirty) {
			return
		}
		seen[i], dirtyIn[i] = true, dirtyIn[i] || dirty
		work = append(work, i)
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		dirty, in := dirtyIn[i], ins[i].text
		switch {
		case strings.HasPrefix(in, "vzeroupper"):
			dirty = false
		case in == "ret" || strings.HasPrefix(in, "ret "):
			retD = retD || dirty
			continue
		case strings.HasPrefix(in, "call"):
			dirty = false
			if m := callTarget.FindStringSubmatch(in); m != nil {
				if n, ok := strings.CutPrefix(m[1], pkgPrefix); ok {
					dirty = retDirty[n]
				}
			}
		case wideVector.MatchString(in):
			dirty = true
		case dirty && legacySSE.MatchString(in):
			if len(bad) < 4 && !slices.Contains(bad, in) {
				bad = append(bad, in)
			}
		}
		if m := branch.FindStringSubmatch(in); m != nil {
			if to, err := strconv.ParseUint(m[2], 16, 64); err == nil {
				if j, ok := at[to]; ok {
					reach(j, dirty)
				}
			}
			if m[1] == "jmp" {
				continue
			}
		} else if strings.HasPrefix(in, "jmp") || strings.HasPrefix(in, "int3") || strings.HasPrefix(in, "ud2") {
			continue // indirect jump, or a trap
		}
		reach(i+1, dirty)
	}
	n := 0
	for i, ok := range seen {
		if ok || strings.HasPrefix(ins[i].text, "int3") {
			n++
		}
	}
	return retD, bad, n
}
