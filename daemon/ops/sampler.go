package ops

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Defaults for NewSampler.
const (
	DefaultSampleEvery = 10 * time.Second
	DefaultSampleKeep  = time.Hour
)

// Point is one tokens-per-second sample.
type Point struct {
	Unix            int64   `json:"unix"`              // when the sample was taken, unix seconds
	TokensPerSecond float64 `json:"tokens_per_second"` // since the sample before it
}

// Sampler records the total token count (prompt plus completion, over all
// batches) at a fixed period and keeps the tokens-per-second between
// consecutive samples for a while, in a ring.
type Sampler struct {
	src   State
	every time.Duration
	keep  time.Duration
	log   *slog.Logger

	mu        sync.Mutex
	baseAt    time.Time // the previous sample; zero before the first
	baseCount int64
	ring      []Point // capacity fixed at construction
	next      int     // where the next point goes
	full      bool    // whether the ring has wrapped

	startOnce sync.Once
	closeOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
}

// NewSampler returns a sampler of src that samples every every (default 10s,
// when every <= 0) and keeps keep of history (default 1h, when keep <= 0).
// It does nothing until Start or Sample.
func NewSampler(src State, every, keep time.Duration) *Sampler {
	if every <= 0 {
		every = DefaultSampleEvery
	}
	if keep <= 0 {
		keep = DefaultSampleKeep
	}
	n := int(keep / every)
	if keep%every != 0 {
		n++
	}
	return &Sampler{
		src:   src,
		every: every,
		keep:  keep,
		log:   slog.Default().With("component", "ops"),
		ring:  make([]Point, max(n, 1)),
		done:  make(chan struct{}),
	}
}

// Start takes a sample now and then one every period, until ctx is done or
// Close is called. Calls after the first do nothing.
func (s *Sampler) Start(ctx context.Context) {
	s.startOnce.Do(func() {
		ctx, s.cancel = context.WithCancel(ctx)
		go s.loop(ctx)
	})
}

// Close stops the sampling goroutine and waits for it. It is safe to call
// more than once, and without Start.
func (s *Sampler) Close() {
	s.closeOnce.Do(func() {
		s.startOnce.Do(func() { close(s.done) }) // never started: nothing to wait for
		if s.cancel != nil {
			s.cancel()
		}
		<-s.done
	})
}

func (s *Sampler) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	s.sampleAndLog(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sampleAndLog(now)
		}
	}
}

func (s *Sampler) sampleAndLog(now time.Time) {
	if err := s.Sample(now); err != nil {
		s.log.Warn("sampling tokens", "err", err)
	}
}

// Sample records the total token count as of now and, from the second sample
// on, the tokens per second since the previous one. The periodic loop calls
// it; tests call it with the times they choose. A sample not after the
// previous one is ignored. When the total drops (a batch was forgotten) no
// rate can be told, so that sample only becomes the base for the next one.
func (s *Sampler) Sample(now time.Time) error {
	batches, err := s.src.Batches()
	if err != nil {
		return fmt.Errorf("listing batches: %w", err)
	}
	count := totalTokens(batches)

	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.baseAt.IsZero() && !now.After(s.baseAt) {
		return nil
	}
	if !s.baseAt.IsZero() && count >= s.baseCount {
		rate := float64(count-s.baseCount) / now.Sub(s.baseAt).Seconds()
		s.ring[s.next] = Point{Unix: now.Unix(), TokensPerSecond: rate}
		s.next = (s.next + 1) % len(s.ring)
		s.full = s.full || s.next == 0
	}
	s.baseAt, s.baseCount = now, count
	return nil
}

// Rate is the latest tokens per second, 0 before there are two samples.
func (s *Sampler) Rate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full && s.next == 0 {
		return 0
	}
	return s.ring[(s.next-1+len(s.ring))%len(s.ring)].TokensPerSecond
}

// History is the points within keep of the latest one, oldest first.
func (s *Sampler) History() []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pts []Point
	if s.full {
		pts = append(pts, s.ring[s.next:]...)
	}
	pts = append(pts, s.ring[:s.next]...)
	if len(pts) == 0 {
		return []Point{}
	}
	// The ring holds keep/every points, but Sample may be called at other
	// times than the period's, so trim by time as well.
	oldest := pts[len(pts)-1].Unix - int64(s.keep/time.Second)
	i := 0
	for i < len(pts) && pts[i].Unix < oldest {
		i++
	}
	return pts[i:]
}
