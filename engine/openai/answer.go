package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// errAnswerTooLarge marks an answer over Config.MaxAnswerBytes. The server
// answered, so it is up: the attempt counts against its request, never
// towards an outage (see call.checkRetry).
var errAnswerTooLarge = errors.New("answer too large")

// answerError is an attempt that failed after the server sent its status
// line and headers: while the body was read (cut short, too large, or the
// attempt's time ran out, bytes still dripping in).
type answerError struct {
	status int
	got    int64 // body bytes that arrived before it failed
	err    error
}

func (e *answerError) Error() string {
	return fmt.Sprintf("read answer (status %d): %v", e.status, e.err)
}

func (e *answerError) Unwrap() error { return e.err }

// answered reports whether err is an attempt the server answered before it
// failed (see answerError).
func answered(err error) bool {
	var ae *answerError
	return errors.As(err, &ae)
}

// stillArriving reports whether err is an attempt whose time ran out while
// a 2xx answer's body was arriving: the server had decided its answer and
// was sending it too slowly (a byte at a time, or for ever). That is the
// request's own failure, like an answer over the cap, whether or not a
// health check can be sent: held as an outage, it would be sent again
// without end.
func stillArriving(err error) bool {
	var ae *answerError
	return errors.Is(err, errAttemptTimeout) && errors.As(err, &ae) &&
		ae.status >= 200 && ae.status < 300 && ae.got > 0
}

// firstChunk is the size of the first buffer an answer without a
// Content-Length is read into; the next ones double.
const firstChunk = 32 << 10

// answerBudget bounds the bytes of answers the engine holds at once
// (Config.MaxAnswerBytesInFlight) and of each one (Config.MaxAnswerBytes),
// whatever the server sends.
//
// An answer with a Content-Length over the cap is refused unread; one
// within it waits for that many bytes of budget and is read into one
// buffer of exactly that size. An answer without one (chunked, compressed)
// reserves small bytes and is read in chunks; to go past small it takes
// grow, which one answer holds at a time, and reserves up to the cap. No
// one waits for budget while holding more than small without holding grow,
// and the budget is at least the cap plus small for every answer that can
// be read at once (see newAnswerBudget), so the one growing always gets its
// bytes once the answers being read without waiting are done: no deadlock.
type answerBudget struct {
	sem   *semaphore.Weighted
	total int64         // the budget
	max   int64         // one answer
	small int64         // what an answer without a Content-Length holds before it grows
	grow  chan struct{} // held (one slot) by the answer growing past small

	held atomic.Int64 // bytes reserved now
	peak atomic.Int64 // the most ever reserved at once (tests)
}

// newAnswerBudget returns a budget of total bytes for answers of at most
// max bytes each, of which at most readers are read at once.
func newAnswerBudget(total, max int64, readers int) *answerBudget {
	small := min(max, (total-max)/int64(readers))
	return &answerBudget{
		sem: semaphore.NewWeighted(total), total: total, max: max, small: small,
		grow: make(chan struct{}, 1),
	}
}

func (b *answerBudget) acquire(ctx context.Context, n int64) error {
	if n == 0 {
		return nil
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		return fmt.Errorf("wait for %d bytes of openai.max_answer_bytes_inflight: %w", n, err)
	}
	held := b.held.Add(n)
	for {
		p := b.peak.Load()
		if held <= p || b.peak.CompareAndSwap(p, held) {
			return nil
		}
	}
}

// release returns n bytes reserved by read.
func (b *answerBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.held.Add(-n)
	b.sem.Release(n)
}

// tooLarge is the error for an answer over the cap; length is its
// Content-Length, or -1.
func (b *answerBudget) tooLarge(length int64) error {
	if length >= 0 {
		return fmt.Errorf("%w: Content-Length %d is over openai.max_answer_bytes (%d bytes)", errAnswerTooLarge, length, b.max)
	}
	return fmt.Errorf("%w: over openai.max_answer_bytes (%d bytes)", errAnswerTooLarge, b.max)
}

// read reads an answer body whose Content-Length is length (-1 when
// unknown) and returns it with the bytes of budget it holds; the caller
// returns them with release once it no longer holds the body. ctx bounds
// the waits for budget; the body's own reads end with the attempt.
func (b *answerBudget) read(ctx context.Context, body io.Reader, length int64) ([]byte, int64, error) {
	if length < 0 {
		return b.readUnsized(ctx, body)
	}
	if length > b.max {
		return nil, 0, b.tooLarge(length)
	}
	if err := b.acquire(ctx, length); err != nil {
		return nil, 0, err
	}
	buf := make([]byte, length)
	if _, err := io.ReadFull(body, buf); err != nil {
		b.release(length)
		return nil, 0, err
	}
	return buf, length, nil
}

// readUnsized reads an answer without a Content-Length (see answerBudget).
func (b *answerBudget) readUnsized(ctx context.Context, body io.Reader) (_ []byte, _ int64, err error) {
	held := b.small
	if err := b.acquire(ctx, held); err != nil {
		return nil, 0, err
	}
	growing := false
	defer func() {
		if growing {
			<-b.grow
		}
		if err != nil {
			b.release(held)
		}
	}()

	var chunks [][]byte
	var total int64
	var next []byte // a byte read to learn whether the answer goes on
	for {
		if total == held {
			var one [1]byte
			n, err := io.ReadFull(body, one[:])
			if n == 0 {
				if err == io.EOF {
					break
				}
				return nil, 0, err
			}
			if held == b.max {
				return nil, 0, b.tooLarge(-1)
			}
			select {
			case b.grow <- struct{}{}:
				growing = true
			case <-ctx.Done():
				return nil, 0, fmt.Errorf("wait to read an answer over %d bytes: %w", held, ctx.Err())
			}
			if err := b.acquire(ctx, b.max-held); err != nil {
				return nil, 0, err
			}
			held = b.max
			next = one[:]
		}
		chunk := make([]byte, min(max(total, firstChunk), held-total))
		copied := copy(chunk, next)
		next = nil
		n, err := io.ReadFull(body, chunk[copied:])
		n += copied
		if n > 0 {
			chunks = append(chunks, chunk[:n])
			total += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, 0, err
		}
	}

	// Joining the pieces briefly takes the answer's size again.
	var out []byte
	if len(chunks) == 1 && 2*len(chunks[0]) >= cap(chunks[0]) {
		out = chunks[0] // at most twice its size: not worth a copy
	} else {
		out = make([]byte, 0, total)
		for _, c := range chunks {
			out = append(out, c...)
		}
	}
	kept := int64(cap(out))
	b.release(held - kept)
	held = kept
	return out, kept, nil
}
