package openaitest

import (
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"
)

// Chaos is a seeded source of faults for Options.Fault: each POST draws its
// fault from a random generator seeded with Seed and the POST's number, so
// the n-th POST gets the same fault in every run whatever the order in which
// concurrent requests arrive. The rates are probabilities, checked in the
// order of the fields; their sum should not exceed 1.
//
// Storm, while set, overrides the rates: every POST gets that fault, as when
// a server's engine dies behind a live HTTP front end. Set it with SetStorm.
type Chaos struct {
	Seed uint64
	// Error answers 500 with an OpenAI error object.
	Error float64
	// Reset closes the connection without an answer.
	Reset float64
	// Truncate answers 200 with a JSON body cut short.
	Truncate float64
	// Hang never answers (until the client gives up).
	Hang float64
	// Latency, when set, delays every answer by a random duration below it.
	Latency time.Duration

	storm atomic.Pointer[Fault]
}

// SetStorm makes every POST get f until ClearStorm.
func (c *Chaos) SetStorm(f Fault) { c.storm.Store(&f) }

// ClearStorm ends a storm.
func (c *Chaos) ClearStorm() { c.storm.Store(nil) }

// Fault is an Options.Fault.
func (c *Chaos) Fault(n int64, _ *http.Request, _ []byte) Fault {
	if f := c.storm.Load(); f != nil {
		return *f
	}
	rng := rand.New(rand.NewPCG(c.Seed, uint64(n)))
	var f Fault
	if c.Latency > 0 {
		f.Delay = time.Duration(rng.Int64N(int64(c.Latency)))
	}
	p := rng.Float64()
	for _, r := range []struct {
		rate float64
		set  func()
	}{
		{c.Error, func() { f.Status = http.StatusInternalServerError }},
		{c.Reset, func() { f.Close = true }},
		{c.Truncate, func() { f.Truncate = true }},
		{c.Hang, func() { f.Hang = true }},
	} {
		if p < r.rate {
			r.set()
			break
		}
		p -= r.rate
	}
	return f
}
