package ledger

import (
	"errors"
	"testing"
)

func TestTransition(t *testing.T) {
	tests := []struct {
		from, to string
		ok       bool
	}{
		{"", StatusValidating, true},
		{"", StatusInProgress, true},
		{"", StatusFailed, true},
		{"", StatusCompleted, false},
		{StatusValidating, StatusInProgress, true},
		{StatusValidating, StatusFailed, true},
		{StatusValidating, StatusFinalizing, false},
		{StatusInProgress, StatusCancelling, true},
		{StatusInProgress, StatusFinalizing, true},
		{StatusInProgress, StatusCompleted, false},
		{StatusInProgress, StatusValidating, false},
		{StatusCancelling, StatusFinalizing, true},
		{StatusCancelling, StatusInProgress, false},
		{StatusFinalizing, StatusFinalizing, true},
		{StatusFinalizing, StatusCompleted, true},
		{StatusFinalizing, StatusCancelled, true},
		{StatusFinalizing, StatusExpired, true},
		{StatusFinalizing, StatusFailed, false},
		{StatusCompleted, StatusInProgress, true},
		{StatusCompleted, StatusFinalizing, false},
		{StatusCancelled, StatusInProgress, true},
		{StatusExpired, StatusInProgress, true},
		{StatusFailed, StatusInProgress, false},
		{StatusFailed, StatusFailed, false},
	}
	for _, tt := range tests {
		b := &Batch{ID: "b", Status: tt.from, CreatedAt: 5, InProgressAt: 6, CompletedAt: 7, CancelledAt: 8}
		before := *b
		err := Transition(b, tt.to, 100)
		if !tt.ok {
			if !errors.Is(err, ErrTransition) {
				t.Errorf("%q to %q: error %v, want ErrTransition", tt.from, tt.to, err)
			}
			if b.Status != before.Status || b.CompletedAt != before.CompletedAt {
				t.Errorf("%q to %q: refused, but the batch changed: %+v", tt.from, tt.to, b)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q to %q: %v", tt.from, tt.to, err)
			continue
		}
		if b.Status != tt.to {
			t.Errorf("%q to %q: status %q", tt.from, tt.to, b.Status)
		}
		want := int64(100)
		if tt.to == StatusValidating {
			want = 5 // created_at is kept
		}
		if at := *statusTime[tt.to].at(b); at != want {
			t.Errorf("%q to %q: %s = %d, want %d", tt.from, tt.to, statusTime[tt.to].field, at, want)
		}
	}
}

// A batch that starts over loses the timestamps of its earlier end (Check
// would otherwise see a running batch with completed_at), and one that
// fails before it ran has no in_progress_at.
func TestTransitionClearsStaleTimestamps(t *testing.T) {
	b := &Batch{ID: "b", Status: StatusCompleted, CreatedAt: 1, InProgressAt: 2, FinalizingAt: 3, CompletedAt: 4}
	if err := Transition(b, StatusInProgress, 10); err != nil {
		t.Fatal(err)
	}
	if b.InProgressAt != 10 || b.FinalizingAt != 0 || b.CompletedAt != 0 {
		t.Errorf("after a restart: %+v", b)
	}
	b = &Batch{ID: "c", Status: StatusValidating, CreatedAt: 1, InProgressAt: 2}
	if err := Transition(b, StatusFailed, 10); err != nil {
		t.Fatal(err)
	}
	if b.InProgressAt != 0 || b.FailedAt != 10 {
		t.Errorf("after failing: %+v", b)
	}
}
