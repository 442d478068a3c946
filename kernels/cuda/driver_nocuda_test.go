//go:build !(cuda && linux && (amd64 || arm64))

package cuda

import (
	"errors"
	"strings"
	"testing"
)

func TestOpenDriverWithoutCUDABuild(t *testing.T) {
	d, err := OpenDriver(0, nil)
	if d != nil || !errors.Is(err, ErrNoDevice) {
		t.Fatalf("got %v, %v; want an error wrapping ErrNoDevice", d, err)
	}
	for _, want := range []string{"built without CUDA support", "make build-cuda", "-tags cuda"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if l := LibraryPaths(); l != (Libraries{}) {
		t.Errorf("LibraryPaths = %+v in a build that loads nothing", l)
	}
}
