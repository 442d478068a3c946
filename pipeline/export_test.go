package pipeline

// MaxAnswered is maxAnswered, for the tests of package pipeline_test.
const MaxAnswered = maxAnswered
