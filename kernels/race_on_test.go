//go:build race

package kernels

// raceEnabled: the race detector instruments the code (calls between the
// vector instructions), so a check of the generated code would not see
// what a release build runs.
const raceEnabled = true
