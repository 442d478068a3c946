//go:build !nvml

package nvml

import "fmt"

// Devices fails in this build: NVML needs cgo and the "nvml" tag.
func Devices() ([]Info, error) {
	return nil, fmt.Errorf("%w: this batchd was built without nvml: build it with CGO_ENABLED=1 go build -tags nvml", ErrUnavailable)
}
