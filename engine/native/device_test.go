package native

import "os"

// BATCHD_DEVICE, when set, runs every model of this package's tests on
// that device (cpu or reference): make test runs the suite once on each.
func init() {
	if d := os.Getenv("BATCHD_DEVICE"); d != "" {
		defaultDevice = d
	}
}
