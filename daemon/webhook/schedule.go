package webhook

import (
	"container/heap"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// maxDrain bounds how much of a response body is read so that the
// connection can be reused.
const maxDrain = 64 << 10

// schedule hands jobs to the workers when they fall due, earliest first,
// until Close. It never blocks on the workers without also listening for new
// jobs, so a worker rescheduling a job cannot deadlock with it.
func (s *Sender) schedule(initial []*job) {
	defer s.wg.Done()
	q := jobQueue(initial)
	heap.Init(&q)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var (
			next  *job
			workC chan<- *job
			wakeC <-chan time.Time
		)
		if len(q) > 0 {
			next = q[0]
			if d := time.Until(next.due); d <= 0 {
				workC = s.work
			} else {
				timer.Reset(d)
				wakeC = timer.C
			}
		}
		select {
		case <-s.stop:
			return
		case j := <-s.add:
			heap.Push(&q, j)
		case workC <- next:
			heap.Pop(&q)
		case <-wakeC:
		}
	}
}

// jobQueue is a min-heap of jobs by due time.
type jobQueue []*job

func (q jobQueue) Len() int           { return len(q) }
func (q jobQueue) Less(i, k int) bool { return q[i].due.Before(q[k].due) }
func (q jobQueue) Swap(i, k int)      { q[i], q[k] = q[k], q[i] }
func (q *jobQueue) Push(x any)        { *q = append(*q, x.(*job)) }
func (q *jobQueue) Pop() any {
	old := *q
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return j
}

// retryDelay is the wait before the attempt after the attempts-th: the
// receiver's Retry-After (seconds or an HTTP date) when it sent a usable one,
// else exponential backoff from RetryMin with jitter; RetryMax caps both.
func (s *Sender) retryDelay(attempts int, retryAfter string) time.Duration {
	if d, ok := parseRetryAfter(retryAfter, s.cfg.Now()); ok {
		return min(d, s.cfg.RetryMax)
	}
	d := s.cfg.RetryMax
	if shift := attempts - 1; shift < 62 {
		if b := s.cfg.RetryMin << shift; b > 0 && b>>shift == s.cfg.RetryMin {
			d = min(b, s.cfg.RetryMax)
		}
	}
	// Equal jitter: somewhere in [d/2, d], so receivers that failed together
	// are not retried together, while the wait still grows.
	half := d / 2
	if half > 0 {
		return half + rand.N(d-half+1)
	}
	return d
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(24*time.Hour/time.Second)*365 {
			n = int64(24*time.Hour/time.Second) * 365 // avoid overflow; RetryMax clamps anyway
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// drain reads a little of the body and closes it, so the connection can be
// reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
}
