package daemon_test

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
)

// scrape GETs /metrics from addr and returns each sample line's value by
// its name and labels as written (`batchd_inbox_waiting{source="dir"}`).
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s %s", resp.Status, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// gated is a stand-in whose requests after the first after wait until
// open is called (or their client gives up).
func gated(t *testing.T, after int64) (opts openaitest.Options, open func()) {
	release := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	return openaitest.Options{Fault: func(n int64, r *http.Request, _ []byte) openaitest.Fault {
		if n > after {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return openaitest.Fault{}
	}}, open
}

// batchd_inbox_waiting counts the inputs queued for a batch runner and
// batchd_requests_waiting the requests of running batches not dispatched
// yet; both fall to zero once everything ran.
func TestQueueMetrics(t *testing.T) {
	const gate, lines, workers = 5, 50, 4
	opts, open := gated(t, gate)
	e := newEnv(t, opts)
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	cfg.Pipeline.MaxConcurrentBatches = 1
	cfg.Pipeline.Workers = workers
	d := e.open(cfg)
	addr := d.HTTPAddr()

	e.drop("a.jsonl", chatBatch(lines, "a"))
	waitFor(t, 30*time.Second, "batch a to run", func() bool {
		o := e.object("a")
		return o != nil && o.Status == "in_progress"
	})
	e.drop("b.jsonl", chatBatch(10, "b"))
	e.drop("c.jsonl", chatBatch(10, "c"))
	var m map[string]float64
	waitFor(t, 30*time.Second, "b and c to wait in the inbox", func() bool {
		m = scrape(t, addr)
		return m[`batchd_inbox_waiting{source="dir"}`] == 2
	})
	if v, ok := m[`batchd_inbox_waiting{source="api"}`]; !ok || v != 0 {
		t.Errorf(`batchd_inbox_waiting{source="api"} = %v (present %v), want 0`, v, ok)
	}
	if _, ok := m[`batchd_inbox_waiting{source="bucket"}`]; ok {
		t.Errorf("a daemon without a bucket reports batchd_inbox_waiting for one")
	}
	// a is held after gate requests with at most workers in flight: the
	// rest of its lines wait (b and c are not batches yet).
	if v := m["batchd_requests_waiting"]; v < lines-gate-workers || v > lines {
		t.Errorf("batchd_requests_waiting = %v, want between %d and %d", v, lines-gate-workers, lines)
	}

	open()
	for _, name := range []string{"a", "b", "c"} {
		e.waitEnded(name, "jsonl")
	}
	waitFor(t, 30*time.Second, "the queue metrics to fall to zero", func() bool {
		m = scrape(t, addr)
		return m[`batchd_inbox_waiting{source="dir"}`] == 0 && m["batchd_requests_waiting"] == 0
	})
}

// On a bucket, batchd_inbox_waiting{source="bucket"} is the inputs in the
// bucket's inbox at the latest listing (waiting or running: the shared
// backlog); options files and other keys are not inputs. Published inputs
// leave it.
func TestQueueMetricsBucket(t *testing.T) {
	opts, open := gated(t, 0)
	e := newBucketEnv(t, opts)
	cfg := e.bucketConfig("solo")
	cfg.Listen = "127.0.0.1:0"
	cfg.Pipeline.MaxConcurrentBatches = 1
	d := e.open(cfg)
	e.put("jobs/inbox/q0.options.json", `{"metadata":{"team":"x"}}`)
	for _, name := range []string{"q0", "q1", "q2"} {
		e.put("jobs/inbox/"+name+".jsonl", chatBatch(3, name))
	}
	waitFor(t, 30*time.Second, "the listing to count three inputs", func() bool {
		return scrape(t, d.HTTPAddr())[`batchd_inbox_waiting{source="bucket"}`] == 3
	})
	open()
	for _, name := range []string{"q0", "q1", "q2"} {
		e.waitPublished(name, 60*time.Second)
	}
	waitFor(t, 30*time.Second, "the listing to count none", func() bool {
		m := scrape(t, d.HTTPAddr())
		return m[`batchd_inbox_waiting{source="bucket"}`] == 0 && m["batchd_requests_waiting"] == 0
	})
}
