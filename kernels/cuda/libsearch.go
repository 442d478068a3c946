package cuda

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// The shared libraries the driver loads, newest first.
var (
	cudaLibNames     = []string{"libcuda.so.1", "libcuda.so"}
	cublasLtLibNames = []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}
)

// LibsEnv names the colon-separated directories searched first for
// libcublasLt (and after the dynamic loader's own path for libcuda).
const LibsEnv = "BATCHD_CUDA_LIBS"

// envLibDirs is $BATCHD_CUDA_LIBS split, empty entries dropped.
func envLibDirs(getenv func(string) string) []string {
	var dirs []string
	for _, d := range strings.Split(getenv(LibsEnv), ":") {
		if d = strings.TrimSpace(d); d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// wellKnownLibDirs are where a CUDA toolkit or a pip-installed PyTorch
// (the nvidia-cublas-cu1x wheels) put libcublasLt, those that exist.
func wellKnownLibDirs(getenv func(string) string) []string {
	patterns := []string{
		"/usr/local/cuda/lib64",
		"/usr/local/cuda/targets/*/lib",
	}
	var roots []string // python library roots holding site- or dist-packages
	roots = append(roots, "/usr/lib/python3*", "/usr/local/lib/python3*")
	if home := getenv("HOME"); home != "" {
		roots = append(roots, filepath.Join(home, ".local/lib/python3*"))
	}
	if venv := getenv("VIRTUAL_ENV"); venv != "" {
		roots = append(roots, filepath.Join(venv, "lib/python3*"))
	}
	if conda := getenv("CONDA_PREFIX"); conda != "" {
		patterns = append(patterns, filepath.Join(conda, "lib"))
		roots = append(roots, filepath.Join(conda, "lib/python3*"))
	}
	for _, r := range roots {
		for _, pkgs := range []string{"site-packages", "dist-packages"} {
			for _, sub := range []string{"nvidia/cublas/lib", "nvidia/cu13/lib"} {
				patterns = append(patterns, filepath.Join(r, pkgs, sub))
			}
		}
	}
	patterns = append(patterns, "/usr/lib/python3/dist-packages/nvidia/cublas/lib")
	var dirs []string
	seen := map[string]bool{}
	for _, p := range patterns {
		matches, _ := filepath.Glob(p) // the patterns are well-formed
		for _, m := range matches {
			if st, err := os.Stat(m); err == nil && st.IsDir() && !seen[m] {
				seen[m] = true
				dirs = append(dirs, m)
			}
		}
	}
	return dirs
}

// libCandidates is what to try to dlopen, in order: each of names in each
// of before, then each bare name (the dynamic loader's own search:
// LD_LIBRARY_PATH, ld.so.cache, the system directories), then each name
// in each of after.
func libCandidates(names, before, after []string) []string {
	var c []string
	inDirs := func(dirs []string) {
		for _, d := range dirs {
			for _, n := range names {
				c = append(c, filepath.Join(d, n))
			}
		}
	}
	inDirs(before)
	c = append(c, names...)
	inDirs(after)
	return c
}

// loadedPath is where the library whose file name starts with stem was
// mapped from, read from /proc/self/maps after the dynamic loader found it
// by bare name; "" when it cannot tell.
func loadedPath(stem string) string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		p := fields[5]
		if strings.HasPrefix(p, "/") && strings.HasPrefix(filepath.Base(p), stem) {
			return p
		}
	}
	return ""
}

// Libraries says where the CUDA libraries were loaded from: a path, or the
// bare name when the dynamic loader found it and /proc/self/maps did not
// say where. Empty: not loaded.
type Libraries struct {
	CUDA     string // libcuda
	CublasLt string // libcublasLt
}

var loaded struct {
	sync.Mutex
	libs Libraries
}

// LibraryPaths is where the last OpenDriver found libcuda and libcublasLt
// (those it got as far as loading), for the daemon's report; zero in a
// build without CUDA or before OpenDriver.
func LibraryPaths() Libraries {
	loaded.Lock()
	defer loaded.Unlock()
	return loaded.libs
}

func rememberLibraries(l Libraries) {
	loaded.Lock()
	loaded.libs = l
	loaded.Unlock()
}
