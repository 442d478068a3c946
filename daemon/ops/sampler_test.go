package ops

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestSamplerRate(t *testing.T) {
	src := &fakeState{batches: []BatchView{{ID: "a", InputTokens: 1000, OutputTokens: 500}}}
	s := NewSampler(src, 10*time.Second, time.Hour)
	t0 := time.Unix(1_700_000_000, 0)

	if err := s.Sample(t0); err != nil {
		t.Fatal(err)
	}
	if r := s.Rate(); r != 0 {
		t.Errorf("rate after one sample = %v, want 0", r)
	}
	if h := s.History(); len(h) != 0 {
		t.Errorf("history after one sample = %v, want none", h)
	}

	// 400 prompt + 600 completion tokens over 10 s, in a second batch.
	src.set(BatchView{ID: "a", InputTokens: 1000, OutputTokens: 500},
		BatchView{ID: "b", InputTokens: 400, OutputTokens: 600})
	if err := s.Sample(t0.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if r := s.Rate(); r != 100 {
		t.Errorf("rate = %v, want 100", r)
	}
	want := []Point{{Unix: t0.Unix() + 10, TokensPerSecond: 100}}
	if h := s.History(); !slices.Equal(h, want) {
		t.Errorf("history = %v, want %v", h, want)
	}
}

func TestSamplerIgnoresStaleAndDroppingSamples(t *testing.T) {
	src := &fakeState{batches: []BatchView{{ID: "a", OutputTokens: 100}}}
	s := NewSampler(src, time.Second, time.Hour)
	t0 := time.Unix(1_700_000_000, 0)
	mustSample(t, s, t0)
	src.set(BatchView{ID: "a", OutputTokens: 300})
	mustSample(t, s, t0.Add(2*time.Second)) // 100 tokens/s

	mustSample(t, s, t0.Add(2*time.Second)) // not after the previous: ignored
	src.set()                               // the batch was forgotten: total drops
	mustSample(t, s, t0.Add(3*time.Second))
	if r := s.Rate(); r != 100 {
		t.Errorf("rate after a drop = %v, want the previous 100", r)
	}
	src.set(BatchView{ID: "c", OutputTokens: 40})
	mustSample(t, s, t0.Add(5*time.Second)) // 40 tokens over 2 s, from the new base
	if r := s.Rate(); r != 20 {
		t.Errorf("rate = %v, want 20", r)
	}
	if h := s.History(); len(h) != 2 {
		t.Errorf("history = %v, want 2 points", h)
	}
}

func TestSamplerKeepsOnlyKeep(t *testing.T) {
	src := &fakeState{}
	s := NewSampler(src, 10*time.Second, time.Minute) // a ring of 6
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 20 {
		src.set(BatchView{OutputTokens: int64(i * i * 10)})
		mustSample(t, s, t0.Add(time.Duration(i)*10*time.Second))
	}
	h := s.History()
	if len(h) != 6 {
		t.Fatalf("history has %d points, want 6: %v", len(h), h)
	}
	for i, p := range h {
		n := int64(14 + i) // samples 14..19
		if p.Unix != t0.Unix()+n*10 {
			t.Errorf("point %d at %d, want %d", i, p.Unix, t0.Unix()+n*10)
		}
		// (n² - (n-1)²)·10 tokens over 10 s.
		if want := float64(2*n - 1); p.TokensPerSecond != want {
			t.Errorf("point %d: %v tokens/s, want %v", i, p.TokensPerSecond, want)
		}
	}
	if r := s.Rate(); r != h[len(h)-1].TokensPerSecond {
		t.Errorf("rate = %v, want the latest point's %v", r, h[len(h)-1].TokensPerSecond)
	}

	// Samples taken off the period are trimmed by time too: after a long
	// gap only the points within a minute of the latest remain.
	mustSample(t, s, t0.Add(time.Hour))
	if h := s.History(); len(h) != 1 {
		t.Errorf("history after an hour's gap = %v, want only the latest point", h)
	}
}

func TestSamplerError(t *testing.T) {
	src := &fakeState{}
	src.fail(errors.New("ledger closed"))
	s := NewSampler(src, 0, 0)
	if err := s.Sample(time.Now()); err == nil {
		t.Fatal("Sample succeeded though listing batches failed")
	}
}

// Start samples at once; Close stops the loop and is idempotent.
func TestSamplerStartClose(t *testing.T) {
	src := &fakeState{}
	s := NewSampler(src, time.Hour, 0) // the ticker never fires during the test
	s.Start(context.Background())
	s.Close()
	s.Close()
	src.mu.Lock()
	calls := src.calls
	src.mu.Unlock()
	// Close waited for the loop, whose first act is a sample.
	if calls != 1 {
		t.Errorf("Batches called %d times by Start+Close, want 1", calls)
	}

	NewSampler(src, 0, 0).Close() // never started
}

func TestSamplerStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := NewSampler(&fakeState{}, time.Hour, 0)
	s.Start(ctx)
	cancel()
	<-s.done // the loop ends on its own
	s.Close()
}

func mustSample(t *testing.T, s *Sampler, now time.Time) {
	t.Helper()
	if err := s.Sample(now); err != nil {
		t.Fatal(err)
	}
}
