//go:build !failpoints

package failpoint

// Enabled reports whether the points are compiled in.
const Enabled = false

// Inject does nothing: batchd was built without the failpoints tag.
func Inject(string) error { return nil }
