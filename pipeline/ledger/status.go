package ledger

import (
	"errors"
	"fmt"
	"slices"
)

// Batch statuses, as OpenAI names them.
const (
	StatusValidating = "validating"
	StatusFailed     = "failed"
	StatusInProgress = "in_progress"
	StatusFinalizing = "finalizing"
	StatusCompleted  = "completed"
	StatusExpired    = "expired"
	StatusCancelling = "cancelling"
	StatusCancelled  = "cancelled"
)

// ErrTransition is a status change the batch lifecycle does not allow.
var ErrTransition = errors.New("status change not allowed")

// transitions lists, for each status ("" for a batch not recorded yet),
// the statuses it may change to. Finalizing may be entered again: a run
// that stopped while it finalized (a crash, a failed fsync) finalizes
// again. A batch that ended may run again (its content dropped again, or
// a retry), which starts it over as in_progress; a failed one never does.
var transitions = map[string][]string{
	"":               {StatusValidating, StatusInProgress, StatusFailed},
	StatusValidating: {StatusInProgress, StatusFailed},
	StatusInProgress: {StatusCancelling, StatusFinalizing},
	StatusCancelling: {StatusFinalizing},
	StatusFinalizing: {StatusFinalizing, StatusCompleted, StatusCancelled, StatusExpired},
	StatusCompleted:  {StatusInProgress},
	StatusCancelled:  {StatusInProgress},
	StatusExpired:    {StatusInProgress},
	StatusFailed:     nil,
}

// statusTime names the timestamp each status sets (and Check requires).
var statusTime = map[string]struct {
	field string
	at    func(*Batch) *int64
}{
	StatusValidating: {"created_at", func(b *Batch) *int64 { return &b.CreatedAt }},
	StatusInProgress: {"in_progress_at", func(b *Batch) *int64 { return &b.InProgressAt }},
	StatusFinalizing: {"finalizing_at", func(b *Batch) *int64 { return &b.FinalizingAt }},
	StatusCancelling: {"cancelling_at", func(b *Batch) *int64 { return &b.CancellingAt }},
	StatusCompleted:  {"completed_at", func(b *Batch) *int64 { return &b.CompletedAt }},
	StatusFailed:     {"failed_at", func(b *Batch) *int64 { return &b.FailedAt }},
	StatusExpired:    {"expired_at", func(b *Batch) *int64 { return &b.ExpiredAt }},
	StatusCancelled:  {"cancelled_at", func(b *Batch) *int64 { return &b.CancelledAt }},
}

// Transition is the one place a batch's status changes: it moves b to
// status to at now (Unix seconds) and stamps that status's timestamp, or
// returns ErrTransition (b unchanged) for a change the lifecycle does not
// allow. A batch that starts over (in_progress after it ended) loses the
// timestamps of its earlier end; one that fails before it ran, its
// in_progress_at. It does not write the ledger.
func Transition(b *Batch, to string, now int64) error {
	if !slices.Contains(transitions[b.Status], to) {
		from := b.Status
		if from == "" {
			from = "(new)"
		}
		return fmt.Errorf("batch %s: %s to %s: %w", b.ID, from, to, ErrTransition)
	}
	switch {
	case to == StatusInProgress && terminal(b.Status):
		b.FinalizingAt, b.CompletedAt, b.ExpiredAt, b.CancellingAt, b.CancelledAt = 0, 0, 0, 0, 0
	case to == StatusFailed:
		b.InProgressAt = 0
	}
	b.Status = to
	if at := statusTime[to].at(b); to != StatusValidating || *at == 0 {
		*at = now
	}
	return nil
}

// terminal reports whether status is one a batch ends in.
func terminal(status string) bool {
	switch status {
	case StatusCompleted, StatusFailed, StatusExpired, StatusCancelled:
		return true
	}
	return false
}
