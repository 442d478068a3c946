package openai

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/batchd/batchd/engine"
)

// granted releases one slot of w and returns the name of the waiter it
// went to ("" for none).
func grantNext(t *testing.T, w *window, names map[*waiter]string) string {
	t.Helper()
	w.release()
	got := ""
	for wt, name := range names {
		select {
		case <-wt.ready:
			if got != "" {
				t.Fatalf("one release readied %s and %s", got, name)
			}
			got = name
			delete(names, wt)
		default:
		}
	}
	return got
}

func TestWindowAdmitsByPriorityThenArrival(t *testing.T) {
	w := newWindow(1)
	if w.enqueue(engine.PriorityNormal) != nil {
		t.Fatal("a free slot made the first caller wait")
	}
	names := map[*waiter]string{}
	for _, c := range []struct {
		name string
		prio engine.Priority
	}{{"low", engine.PriorityLow}, {"normal", engine.PriorityNormal}, {"high", engine.PriorityHigh},
		{"normal2", engine.PriorityNormal}, {"online", engine.PriorityOnline}} {
		wt := w.enqueue(c.prio)
		if wt == nil {
			t.Fatalf("%s took a slot of a full window", c.name)
		}
		names[wt] = c.name
	}
	var order []string
	for range 5 {
		order = append(order, grantNext(t, w, names))
	}
	if want := []string{"online", "high", "normal", "normal2", "low"}; !slices.Equal(order, want) {
		t.Fatalf("slots went to %v, want %v", order, want)
	}
	if got := grantNext(t, w, names); got != "" || w.free != 1 {
		t.Fatalf("a release with none waiting went to %q, free %d", got, w.free)
	}
}

// A steady stream of online callers leaves batch callers one slot in
// engine.PriorityShare+1, in their order.
func TestWindowLeavesBatchesAShare(t *testing.T) {
	w := newWindow(1)
	w.enqueue(engine.PriorityOnline)
	names := map[*waiter]string{}
	for i := range 3 {
		names[w.enqueue(engine.PriorityNormal)] = fmt.Sprintf("batch%d", i)
	}
	var batchAt []int
	for i := range 16 {
		names[w.enqueue(engine.PriorityOnline)] = "online"
		if got := grantNext(t, w, names); got != "online" {
			if want := fmt.Sprintf("batch%d", len(batchAt)); got != want {
				t.Fatalf("slot %d went to %q, want %s", i, got, want)
			}
			batchAt = append(batchAt, i)
		}
	}
	share := engine.PriorityShare
	if want := []int{share, 2*share + 1, 3*share + 2}; !slices.Equal(batchAt, want) {
		t.Fatalf("batch callers got slots %v, want %v", batchAt, want)
	}
}

// A caller that gives up leaves the queue; one given a slot as it gave
// up passes the slot on.
func TestWindowCallerGivingUp(t *testing.T) {
	w := newWindow(1)
	w.enqueue(engine.PriorityNormal)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := w.enqueue(engine.PriorityOnline)
	next := w.enqueue(engine.PriorityNormal)
	if err := w.wait(ctx, nil, gone); err != context.Canceled {
		t.Fatalf("wait with a cancelled ctx: %v", err)
	}
	w.release()
	if err := w.wait(context.Background(), nil, next); err != nil {
		t.Fatal(err)
	}
	// next holds the slot; a waiter granted it as it gives up hands it on.
	late := w.enqueue(engine.PriorityOnline)
	after := w.enqueue(engine.PriorityLow)
	w.release() // to late
	closed := make(chan struct{})
	close(closed)
	late.ready = make(chan struct{}) // as if the grant raced the close
	if err := w.wait(context.Background(), closed, late); err != errClosed {
		t.Fatalf("wait on a closed engine: %v", err)
	}
	select {
	case <-after.ready:
	default:
		t.Fatal("the slot of a waiter that gave up was not passed on")
	}
}
