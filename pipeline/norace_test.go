//go:build !race

package pipeline_test

// raceEnabled is true when the tests run with -race (ten times slower).
const raceEnabled = false
