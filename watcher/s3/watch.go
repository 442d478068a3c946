package s3

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/minio/minio-go/v7"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/store/bucket/s3client"
	"github.com/batchd/batchd/watcher"
)

// Watcher reports the inputs and cancel requests in the bucket's inbox/.
//
// Delivery semantics, as the folder source's:
//   - Each input object is delivered as an Input event (Path its key,
//     Version its ETag), once per ETag until Forget(key); a new version is
//     delivered again.
//   - A NAME.cancel object is delivered as a Cancel event, once per ETag
//     until Forget(key).
//   - Notifications (MinIO's webhook target posting to the daemon, passed
//     to Notify) are hints that make delivery prompt; the truth is a
//     listing of inbox/, at Open and every ListInterval, so a lost
//     notification delays an input by at most one interval.
//   - An input whose name batchd cannot use (filecontract.CheckName: too long,
//     control characters, or a key in a nested prefix such as
//     inbox/a/b.jsonl or inbox//b.jsonl) is delivered as a Refused event
//     named filecontract.SafeName of it, once per ETag as an input is. Other
//     keys in nested prefixes (options, cancels, dot-names) are ignored.
//   - A key no request can name as itself (a . or .. element, as in
//     inbox/../outbox/x.jsonl, over 1024 bytes, or not UTF-8) is ignored
//     with a warning: a notification naming one is forged or broken, and
//     reading or moving it would address another key or fail forever.
//   - What a key's listing no longer shows is forgotten.
type Watcher struct {
	b      *s3client.Bucket
	log    *slog.Logger
	events chan watcher.Event

	mu        sync.Mutex
	delivered map[string]string // key → ETag delivered
	inputs    int               // input objects in the inbox at the latest listing; -1 before the first

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewWatcher returns a watcher of b's inbox; Open starts it.
func NewWatcher(b *s3client.Bucket) *Watcher {
	return &Watcher{b: b, log: b.Logger(), events: make(chan watcher.Event, 1024), delivered: map[string]string{}, inputs: -1}
}

// Inputs is how many input objects (NAME.jsonl, NAME.json) the inbox held
// at the latest listing: waiting for a daemon or running on one, since an
// input leaves the inbox only once its batch is done. -1 before the first
// listing.
func (w *Watcher) Inputs() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inputs
}

// Events delivers inputs and cancel requests; it is closed by Close.
func (w *Watcher) Events() <-chan watcher.Event { return w.events }

// Open starts listing. The listing runs until Close, not until ctx is
// done; it keeps ctx's values.
func (w *Watcher) Open(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("open bucket watcher: %w", err)
	}
	ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	w.wg.Add(1)
	go w.listLoop(ctx)
	return nil
}

// Close stops the watcher and closes Events.
func (w *Watcher) Close(context.Context) error {
	if w.cancel != nil {
		w.cancel()
	}
	w.wg.Wait()
	close(w.events)
	return nil
}

// Forget lets key be delivered again (the daemon is done with it, or
// failed on it and wants it retried at the next listing).
func (w *Watcher) Forget(key string) {
	w.mu.Lock()
	delete(w.delivered, key)
	w.mu.Unlock()
}

func (w *Watcher) listLoop(ctx context.Context) {
	defer w.wg.Done()
	t := time.NewTicker(w.b.Config().ListInterval)
	defer t.Stop()
	for {
		if err := w.list(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("list inbox", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// list delivers every undelivered object of the inbox, oldest first, and
// forgets keys that are gone.
func (w *Watcher) list(ctx context.Context) error {
	prefix := w.b.InboxKey("")
	// Recursive, so that inputs in nested prefixes are seen (and refused).
	found, err := w.b.Objects(ctx, prefix)
	if err != nil {
		return err
	}
	seen := make(map[string]bool, len(found))
	inputs := 0
	for _, o := range found {
		seen[o.Key] = true
		if rest := strings.TrimPrefix(o.Key, prefix); !strings.Contains(rest, "/") {
			if kind, _, _, ok := watcher.Classify(rest); ok && kind == watcher.Input {
				inputs++
			}
		}
	}
	w.mu.Lock()
	w.inputs = inputs
	for k := range w.delivered {
		if !seen[k] {
			delete(w.delivered, k)
		}
	}
	w.mu.Unlock()
	sortByTime(found)
	for _, o := range found {
		if !w.offer(ctx, o.Key, o.ETag) {
			return nil
		}
	}
	return nil
}

// offer delivers key at etag unless it was delivered; it reports false when
// ctx ended.
func (w *Watcher) offer(ctx context.Context, key, etag string) bool {
	ev, ok := w.classify(key)
	if !ok {
		return true
	}
	ev.Version = strings.Trim(etag, `"`)
	w.mu.Lock()
	if w.delivered[key] == ev.Version {
		w.mu.Unlock()
		return true
	}
	w.delivered[key] = ev.Version
	w.mu.Unlock()
	select {
	case w.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// classify tells what the inbox key is (watcher.Classify, by the last
// element of the key): an input, a cancel request, an input refused for
// its name; ok is false for keys to ignore.
func (w *Watcher) classify(key string) (ev watcher.Event, ok bool) {
	rest, ok := strings.CutPrefix(key, w.b.InboxKey(""))
	if !ok {
		return ev, false
	}
	if !addressable(key) {
		// Not even refused: moving it to rejected/ would address
		// another key, or fail at every try.
		w.log.Warn("inbox key ignored: no request can name it (a . or .. element, over 1024 bytes, or not UTF-8)", "key", key)
		return ev, false
	}
	dir, base := "", rest
	if i := strings.LastIndex(rest, "/"); i >= 0 {
		dir, base = rest[:i+1], rest[i+1:]
	}
	kind, name, format, ok := watcher.Classify(base)
	if !ok || dir != "" && kind != watcher.Input {
		return ev, false
	}
	ev = watcher.Event{Kind: kind, Name: dir + name, Path: key, Format: format}
	if kind == watcher.Input {
		if code, msg := filecontract.CheckName(ev.Name); code != "" {
			ev.Kind, ev.Name, ev.Code, ev.Message = watcher.Refused, filecontract.SafeName(ev.Name), code, msg
		}
	}
	return ev, true
}

// Event is what MinIO's webhook notification target posts (the fields
// batchd reads).
type Event struct {
	EventName string `json:"EventName"`
	Key       string `json:"Key"`
	Records   []struct {
		EventName string `json:"eventName"`
		S3        struct {
			Bucket struct {
				Name string `json:"name"`
			} `json:"bucket"`
			Object struct {
				Key  string `json:"key"`
				ETag string `json:"eTag"`
			} `json:"object"`
		} `json:"s3"`
	} `json:"Records"`
}

// Notify delivers what a bucket notification names: objects created in
// this bucket's inbox. Keys in notifications are URL-encoded. It reports
// how many records it took.
func (w *Watcher) Notify(ctx context.Context, ev Event) int {
	n := 0
	inbox := w.b.InboxKey("")
	for _, rec := range ev.Records {
		if rec.S3.Bucket.Name != w.b.Name() || !strings.HasPrefix(rec.EventName, "s3:ObjectCreated:") && !strings.HasPrefix(rec.EventName, "ObjectCreated:") {
			continue
		}
		key := rec.S3.Object.Key
		if k, err := url.QueryUnescape(key); err == nil {
			key = k
		}
		if !strings.HasPrefix(key, inbox) {
			continue
		}
		if !w.offer(ctx, key, rec.S3.Object.ETag) {
			break
		}
		n++
	}
	return n
}

// sortByTime orders a listing (sorted by key) first come, first served.
func sortByTime(objs []minio.ObjectInfo) {
	slices.SortStableFunc(objs, func(a, b minio.ObjectInfo) int {
		if c := a.LastModified.Compare(b.LastModified); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
}

// maxKeyLen is the longest object key S3 and MinIO accept, in bytes.
const maxKeyLen = 1024

// addressable reports whether a request can name key as itself: HTTP
// clients and servers resolve "." and ".." elements of a path, so a
// request for jobs/inbox/../outbox/x.jsonl reaches jobs/outbox/x.jsonl;
// a key over S3's 1024 bytes, or not UTF-8, is answered 400, which the
// bucket's retries take for an outage. MinIO stores no such key; a
// notification naming one is forged or broken.
func addressable(key string) bool {
	if len(key) > maxKeyLen || !utf8.ValidString(key) {
		return false
	}
	for _, el := range strings.Split(key, "/") {
		if el == "." || el == ".." {
			return false
		}
	}
	return true
}
