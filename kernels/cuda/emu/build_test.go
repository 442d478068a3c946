package emu

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
)

// TestParseKernels reads signatures from the files batchd.cu includes, and
// refuses a parameter type the launcher cannot pass, or a kernel declared
// twice, naming the file, kernel and parameter.
func TestParseKernels(t *testing.T) {
	src := func(a, b string) fstest.MapFS {
		return fstest.MapFS{
			"csrc/batchd.cu": {Data: []byte("// #include \"gone.cu\"\n#include \"a.cu\"\n#include \"b.cu\"\n")},
			"csrc/a.cu":      {Data: []byte(a)},
			"csrc/b.cu":      {Data: []byte(b)},
		}
	}
	ks, err := parseKernels(src(
		"KERNEL void one(float* __restrict__ out,\n\tconst int *in, long long n) {}\n/* KERNEL void hidden(int x) */",
		"KERNEL void two(void) {}\nKERNEL void three(unsigned long long s, float f) {}"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range ks {
		var ps []string
		for _, p := range k.params {
			ps = append(ps, p.ctype+" "+p.name)
		}
		got = append(got, k.name+"("+strings.Join(ps, ", ")+")")
	}
	want := "one(float* out, const int* in, long long n) two() three(unsigned long long s, float f)"
	if strings.Join(got, " ") != want {
		t.Errorf("parsed %q, want %q", strings.Join(got, " "), want)
	}

	_, err = parseKernels(src("KERNEL void ok(int a) {}", "KERNEL void bad(float* out, double scale) {}"))
	if err == nil || !strings.Contains(err.Error(), `csrc/b.cu: kernel bad parameter 1 ("double scale"): type "double"`) {
		t.Errorf("double parameter: %v", err)
	}
	_, err = parseKernels(src("KERNEL void k(int a) {}", "KERNEL void k(int a) {}"))
	if err == nil || !strings.Contains(err.Error(), "kernel k is also declared in csrc/a.cu") {
		t.Errorf("kernel declared twice: %v", err)
	}
}

// TestNoCompiler: without a compiler Open says what to install.
func TestNoCompiler(t *testing.T) {
	t.Setenv("BATCHD_EMU_CXX", "batchd-no-such-compiler")
	_, err := Open()
	if !errors.Is(err, ErrNoCompiler) || !strings.Contains(err.Error(), "apt install clang-19") {
		t.Fatalf("Open without a compiler: %v", err)
	}
}

// TestConcurrentBuild: processes (here goroutines) building the harness
// into an empty cache at once all get a working one.
func TestConcurrentBuild(t *testing.T) {
	if _, _, err := findCompiler(); err != nil && os.Getenv("BATCHD_REQUIRE_CLANG") != "1" {
		t.Skipf("skipping: %v", err)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir()) // os.UserCacheDir on macOS
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() {
			d, err := Open()
			if err == nil {
				err = d.Sync()
				d.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d: %v", i, err)
		}
	}
}
