package daemon_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// outboxReader polls an outbox and checks every final file it finds whole:
// each line of NAME.output.jsonl and NAME.errors.jsonl is JSON ending in a
// newline, NAME.batch.json is JSON, and once NAME.batch.json is terminal the
// result files have the counts it reports. Temporary files (dot-names) are
// not final and are skipped. It also records the sizes it saw of each
// result file: one written in place would show an empty or shorter
// version first, while one renamed into place has one size (each name
// below is published once).
type outboxReader struct {
	dir string

	mu       sync.Mutex
	problems []string
	scans    int
	reads    int
	terminal map[string]bool // names whose terminal object and files were checked
	sizes    map[string]map[int]bool
}

func (r *outboxReader) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.problems) < 20 {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	}
}

// read reads a final file; a file renamed away between the listing and the
// read is not there (ok false).
func (r *outboxReader) read(name string) (raw []byte, ok bool) {
	raw, err := os.ReadFile(filepath.Join(r.dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		r.fail("read %s: %v", name, err)
		return nil, false
	}
	r.mu.Lock()
	r.reads++
	r.mu.Unlock()
	return raw, true
}

// jsonLines checks that raw is whole JSON lines and returns how many.
func (r *outboxReader) jsonLines(name string, raw []byte) int {
	if len(raw) == 0 {
		return 0
	}
	if raw[len(raw)-1] != '\n' {
		r.fail("%s: %d bytes, last line not ending in a newline (torn): %q", name, len(raw), tail(raw))
	}
	n := 0
	for i, line := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
		if !json.Valid(line) {
			r.fail("%s: line %d is not JSON: %q", name, i+1, tail(line))
		}
		n++
	}
	return n
}

func tail(b []byte) []byte {
	if len(b) > 80 {
		return b[len(b)-80:]
	}
	return b
}

func (r *outboxReader) scan() {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.fail("read outbox: %v", err)
		}
		return
	}
	for _, ent := range ents {
		name := ent.Name()
		switch {
		case strings.HasPrefix(name, "."):
		case strings.HasSuffix(name, ".output.jsonl"), strings.HasSuffix(name, ".errors.jsonl"):
			if raw, ok := r.read(name); ok {
				r.jsonLines(name, raw)
				r.mu.Lock()
				if r.sizes[name] == nil {
					r.sizes[name] = map[int]bool{}
				}
				r.sizes[name][len(raw)] = true
				r.mu.Unlock()
			}
		case strings.HasSuffix(name, ".batch.json"):
			r.object(strings.TrimSuffix(name, ".batch.json"))
		}
	}
	r.mu.Lock()
	r.scans++
	r.mu.Unlock()
}

// object checks NAME.batch.json, and when it is terminal the result files
// it counts (published before it, and not changed after).
func (r *outboxReader) object(name string) {
	raw, ok := r.read(name + ".batch.json")
	if !ok {
		return
	}
	var o pipeline.BatchObject
	if err := json.Unmarshal(raw, &o); err != nil {
		r.fail("%s.batch.json does not parse (%v): %q", name, err, tail(raw))
		return
	}
	if !pipeline.Terminal(o.Status) {
		return
	}
	out, ok1 := r.read(name + ".output.jsonl")
	errs, ok2 := r.read(name + ".errors.jsonl")
	if !ok1 || !ok2 {
		r.fail("%s.batch.json is %s, but its result files are not both there (output %v, errors %v)", name, o.Status, ok1, ok2)
		return
	}
	c := o.RequestCounts
	if got := r.jsonLines(name+".output.jsonl", out); got != c.Completed {
		r.fail("%s.batch.json (%s) counts %d completed, the output file has %d lines", name, o.Status, c.Completed, got)
	}
	if got := r.jsonLines(name+".errors.jsonl", errs); got != c.Failed {
		r.fail("%s.batch.json (%s) counts %d failed, the errors file has %d lines", name, o.Status, c.Failed, got)
	}
	r.mu.Lock()
	r.terminal[name] = true
	r.mu.Unlock()
}

// A reader polling outbox/ while batches of different sizes run and publish
// never sees a torn or partial final file: batchd writes each one beside
// its name and renames it into place, and writes the terminal
// NAME.batch.json only after the result files it counts.
func TestReaderNeverSeesATornFinalFile(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.config())
	r := &outboxReader{dir: e.dirs.Outbox, terminal: map[string]bool{}, sizes: map[string]map[int]bool{}}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
				r.scan()
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-stopped
	}()

	sizes := map[string]int{"one": 1, "seven": 7, "forty": 40, "twohundred": 200, "twothousand": 2000, "fivethousand": 5000}
	for name, n := range sizes {
		e.drop(name+".jsonl", chatBatch(n, name)+"{not json\n")
	}
	for name, n := range sizes {
		o := e.waitEnded(name, "jsonl")
		if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != n || o.RequestCounts.Failed != 1 {
			t.Fatalf("%s: %s %+v, want completed with %d completed and 1 failed", name, o.Status, o.RequestCounts, n)
		}
		e.check(name, "jsonl")
	}
	// The reader has checked each batch's terminal object and files at
	// least once.
	waitFor(t, 60*time.Second, "the reader to check every finished batch", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.terminal) == len(sizes)
	})
	close(stop)
	<-stopped
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.problems {
		t.Error(p)
	}
	for name, seen := range r.sizes {
		if len(seen) != 1 {
			t.Errorf("%s was seen at %d different sizes (%v): written in place, not renamed into place", name, len(seen), seen)
		}
	}
	t.Logf("reader: %d scans, %d whole reads of final files", r.scans, r.reads)
}

// A link planted in outbox/ or done/ where batchd will write (the final
// names, and the temporary names it writes beside them) is replaced, never
// written through: the files it points at, outside DATA, keep their bytes,
// and the batch's results are whole and in place.
func TestLinksInOutboxAndDoneAreReplacedNotWrittenThrough(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.config())
	outside := t.TempDir()
	for _, dir := range []string{e.dirs.Outbox, e.dirs.Done} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const name = "linked"
	links := []string{
		filepath.Join(e.dirs.Outbox, name+".output.jsonl"),
		filepath.Join(e.dirs.Outbox, name+".errors.jsonl"),
		filepath.Join(e.dirs.Outbox, name+".batch.json"),
		filepath.Join(e.dirs.Outbox, "."+name+".output.jsonl.tmp"),
		filepath.Join(e.dirs.Outbox, "."+name+".errors.jsonl.tmp"),
		filepath.Join(e.dirs.Done, name+".jsonl"),
	}
	want := map[string][]byte{}
	for i, link := range links {
		target := filepath.Join(outside, fmt.Sprintf("target-%d", i))
		content := []byte(fmt.Sprintf("OUTSIDE-%d: must not change\n", i))
		if err := os.WriteFile(target, content, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		want[target] = content
	}

	e.drop(name+".jsonl", chatBatch(30, name)+"{not json\n")
	o := e.waitEnded(name, "jsonl")
	// waitEnded's Stat of done/NAME.jsonl follows the planted link: wait
	// for the input itself to have replaced it.
	waitFor(t, 60*time.Second, "the input to replace the link in done/", func() bool {
		st, err := os.Lstat(filepath.Join(e.dirs.Done, name+".jsonl"))
		return err == nil && st.Mode().IsRegular()
	})
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 30 || o.RequestCounts.Failed != 1 {
		t.Fatalf("%s %+v, want completed with 30 completed and 1 failed", o.Status, o.RequestCounts)
	}
	e.check(name, "jsonl")

	for target, content := range want {
		got, err := os.ReadFile(target)
		if err != nil {
			t.Fatalf("target outside DATA: %v", err)
		}
		if !bytes.Equal(got, content) {
			t.Errorf("%s was written through a link: %d bytes %q, want %q", target, len(got), tail(got), content)
		}
	}
	// The final names are regular files now, the links replaced.
	for _, link := range links[:3] {
		st, err := os.Lstat(link)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Mode().IsRegular() {
			t.Errorf("%s is %s, want a regular file (the link replaced)", filepath.Base(link), st.Mode().Type())
		}
	}
	st, err := os.Lstat(links[5])
	if err != nil || !st.Mode().IsRegular() {
		t.Errorf("done/%s.jsonl: %v %v, want the input moved over the link", name, st, err)
	}
}
