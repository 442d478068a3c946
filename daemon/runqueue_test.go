package daemon

import (
	"strings"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/watcher"
)

// order pushes inputs named by their priority's initial (h, n, l) and a
// number, then takes them all and returns their names in run order.
func order(t *testing.T, q *runQueue, names ...string) string {
	t.Helper()
	ranks := map[byte]engine.Priority{'h': engine.PriorityHigh, 'n': engine.PriorityNormal, 'l': engine.PriorityLow}
	for _, name := range names {
		if !q.push(delivery{ev: watcher.Event{Name: name}, rank: ranks[name[0]]}) {
			t.Fatalf("push %s refused", name)
		}
	}
	var got []string
	for range names {
		dl, ok := q.next()
		if !ok {
			t.Fatal("queue closed")
		}
		got = append(got, dl.ev.Name)
		q.finished(dl.ev.Name)
	}
	return strings.Join(got, " ")
}

// The run queue takes the highest priority first, in arrival order within
// one; after engine.PriorityShare runs went over a lower priority, the
// earliest of the lower ones runs, so none starves.
func TestRunQueueOrdersByPriorityWithoutStarving(t *testing.T) {
	if engine.PriorityShare != 4 {
		t.Fatalf("the expected orders below assume engine.PriorityShare 4, it is %d", engine.PriorityShare)
	}
	for _, tc := range []struct{ in, want string }{
		{"n1 n2 n3", "n1 n2 n3"},
		{"l1 n1 h1 n2 h2", "h1 h2 n1 n2 l1"},
		{"l1 h1 h2 h3 h4 h5 h6", "h1 h2 h3 h4 l1 h5 h6"},
		{"l1 n1 h1 h2 h3 h4 h5 h6 h7 h8 h9 h10", "h1 h2 h3 h4 l1 h5 h6 h7 h8 n1 h9 h10"},
	} {
		if got := order(t, newRunQueue(), strings.Fields(tc.in)...); got != tc.want {
			t.Errorf("queued %s: ran %s, want %s", tc.in, got, tc.want)
		}
	}
}

// An input put back after its run stopped (a full disk) runs first, whatever
// its priority.
func TestRunQueueRequeuedRunsFirst(t *testing.T) {
	q := newRunQueue()
	q.push(delivery{ev: watcher.Event{Name: "l1"}, rank: engine.PriorityLow})
	q.push(delivery{ev: watcher.Event{Name: "h1"}, rank: engine.PriorityHigh})
	dl, _ := q.next()
	if dl.ev.Name != "h1" {
		t.Fatalf("first run %s, want h1", dl.ev.Name)
	}
	q.push(delivery{ev: watcher.Event{Name: "h2"}, rank: engine.PriorityHigh})
	stopped, _ := q.next()
	if stopped.ev.Name != "h2" {
		t.Fatalf("second run %s, want h2", stopped.ev.Name)
	}
	q.requeue(stopped)
	q.push(delivery{ev: watcher.Event{Name: "h3"}, rank: engine.PriorityHigh})
	var got []string
	for range 3 {
		dl, _ := q.next()
		got = append(got, dl.ev.Name)
	}
	if s := strings.Join(got, " "); s != "h2 h3 l1" {
		t.Fatalf("after requeueing h2: ran %s, want h2 h3 l1", s)
	}
}
