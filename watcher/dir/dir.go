// Package dir is the inbox-folder batch source: it watches the top level of
// one folder for complete input files (NAME.jsonl, NAME.json) and cancel
// requests (NAME.cancel) and reports them as watcher.Events.
//
// It owns only its in-memory view of the folder: it never moves, deletes or
// parses inputs (it reads their last bytes to see that they are complete),
// and never follows a symbolic link or opens anything but a regular file.
// It imports no batchd package but watcher.
package dir

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/watcher"
)

const (
	// eventBuffer is the capacity of the Events channel.
	eventBuffer = 1024
	// maxHints bounds the set of names hinted by fsnotify and not yet
	// checked; past it the hints are dropped for one full rescan.
	maxHints = 16384
	// minTick is the shortest period of the pending-file check.
	minTick = 10 * time.Millisecond
	// dirPerm is the mode of a created inbox folder.
	dirPerm = 0o755
)

// Log keys.
const (
	keyBatch = "batch"
	keyPath  = "path"
	keyErr   = "err"
	keyKind  = "kind"
	keyDir   = "dir"
	keyFmt   = "format"
	keyPoll  = "poll_interval"
	keyCode  = "code"
	keyMsg   = "reason"
)

// Watcher reports the complete inputs and cancel requests in one inbox folder.
//
// Delivery semantics:
//   - Each complete input file is delivered at least once, as an Input event.
//     A given version of a file (path, size, mtime) is delivered once until
//     Forget(path); a new version (the file was rewritten in place) is
//     delivered again once it is complete.
//   - A NAME.cancel is delivered as a Cancel event as soon as it is seen,
//     whatever its content, once while it exists until Forget(path).
//   - An input is complete when its size and mtime were unchanged across two
//     observations at least Settle apart and it ends completely: a .jsonl is
//     empty or ends with '\n', a .json's last non-whitespace byte is '}'.
//     Producers should write elsewhere (or to a dot-name, *.tmp, *.part) and
//     rename in; a file renamed in waits Settle like any other.
//   - fsnotify events are only hints; the truth is a scan of the folder: one
//     at Open, one every Rescan (every PollInterval when polling), and one
//     after any fsnotify error or queue overflow.
//   - What one scan or check finds complete is delivered in order of mtime,
//     then name.
//   - A full Events channel holds the watcher back; nothing is dropped. Close
//     stops it even while it is blocked on a send.
//   - What the watcher remembers about a path (pending, delivered) is dropped
//     when the file is seen gone: a file removed and dropped in again is a new
//     file.
//   - An input batchd cannot take is delivered as a Refused event (once
//     while it exists, until Forget(path)), with a warning in the log, and
//     never read: one whose name CheckName refuses (Event.Name is then
//     filecontract.SafeName of it), a symbolic link (whatever it points at), a
//     FIFO, socket or device, and an input that stayed unchanged but
//     incomplete for IncompleteAfter. A directory named like an input, and a
//     NAME.cancel that is not a usable regular file, are logged once and
//     otherwise ignored.
//
// Use New, then Open; read Events until it is closed; call Forget when done
// with (or failed on) a file; Close stops the watcher and closes Events.
type Watcher struct {
	cfg       Config
	dir       string
	log       *slog.Logger
	events    chan watcher.Event
	newNotify func() (*fsnotify.Watcher, error) // tests replace it

	mu       sync.Mutex // guards the life-cycle fields below
	opened   bool
	running  bool // the loop goroutine was started
	closed   bool
	cancel   context.CancelFunc
	done     chan struct{} // closed when every goroutine has returned
	closeErr error         // written before done is closed

	// Hints from the fsnotify reader to the loop.
	hintMu     sync.Mutex
	hints      map[string]struct{} // base names to check
	fullRescan bool                // a full rescan is wanted
	rearm      bool                // the folder itself was removed or moved
	wake       chan struct{}       // capacity 1: hints are waiting
	notifyLost atomic.Bool         // fsnotify stopped: poll from now on

	// deliveredMu guards delivered, which Forget changes.
	deliveredMu sync.Mutex
	delivered   map[string]deliveredFile // by base name

	// Owned by the loop goroutine (by Open before it starts it).
	fsw     *fsnotify.Watcher // nil when polling from the start
	polling bool
	pending map[string]*candidate // by base name
	gen     uint64                // generation of the latest full scan
}

// candidate is an input seen but not yet complete.
type candidate struct {
	class  class
	v      version   // latest version observed
	since  time.Time // when v was first observed
	parked bool      // v settled but its tail is incomplete: not re-checked on ticks
	gen    uint64    // scan generation that last saw it
}

// deliveredFile is the version of a file handed out.
type deliveredFile struct {
	v   version
	gen uint64
	// refused is the code the entry was refused with (delivered as Refused,
	// or logged); it is not looked at again while it stays refusable.
	refused string
}

// item is an event ready to send, with its sort key.
type item struct {
	ev    watcher.Event
	mtime int64
}

// New returns a Watcher for cfg; zero fields take their defaults. It does no
// I/O: Open validates cfg and starts watching.
func New(cfg Config) *Watcher {
	cfg = cfg.withDefaults()
	dir := filepath.Clean(cfg.Dir)
	return &Watcher{
		cfg:       cfg,
		dir:       dir,
		log:       cfg.Logger.With("component", "watcher/dir", keyDir, dir),
		events:    make(chan watcher.Event, eventBuffer),
		newNotify: fsnotify.NewWatcher,
		done:      make(chan struct{}),
		hints:     make(map[string]struct{}),
		wake:      make(chan struct{}, 1),
		delivered: make(map[string]deliveredFile),
		pending:   make(map[string]*candidate),
	}
}

// Open creates the inbox folder if missing, starts fsnotify (unless polling;
// if fsnotify cannot be set up it logs a warning and polls), scans the folder
// and starts the watcher's goroutines. They run until Close, not until ctx
// is done.
func (w *Watcher) Open(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("open inbox watcher: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opened || w.closed {
		return errors.New("open inbox watcher: already opened or closed")
	}
	w.opened = true
	if err := w.cfg.Validate(); err != nil {
		return fmt.Errorf("open inbox watcher: config: %w", err)
	}
	if err := os.MkdirAll(w.dir, dirPerm); err != nil {
		return fmt.Errorf("create inbox: %w", err)
	}

	w.polling = w.cfg.Poll
	if !w.polling {
		fsw, err := w.startNotify()
		if err != nil {
			w.log.Warn("fsnotify unavailable; polling the inbox instead",
				keyErr, err, keyPoll, w.cfg.PollInterval)
			w.polling = true
		} else {
			w.fsw = fsw
		}
	}

	// The watch is set before the first scan so that nothing slips between.
	initial, err := w.scan(time.Now())
	if err != nil {
		if w.fsw != nil {
			_ = w.fsw.Close()
		}
		return fmt.Errorf("scan inbox: %w", err)
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.running = true
	go w.run(runCtx, initial)
	return nil
}

// Events returns the channel of events. It is closed after Close, once the
// watcher has stopped.
func (w *Watcher) Events() <-chan watcher.Event { return w.events }

// Forget tells the watcher that the consumer is done with (or failed on) the
// file at path, an Event's Path. A later scan delivers it again if it is still
// there (after Settle, for an input).
func (w *Watcher) Forget(path string) {
	path = filepath.Clean(path)
	if filepath.Dir(path) != w.dir {
		w.log.Debug("forget: path not in the inbox", keyPath, path)
		return
	}
	w.deliveredMu.Lock()
	delete(w.delivered, filepath.Base(path))
	w.deliveredMu.Unlock()
}

// Close stops the watcher, waits for its goroutines (or for ctx) and closes
// Events. It may be called more than once, and without Open.
func (w *Watcher) Close(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		if w.running {
			w.cancel()
		} else {
			close(w.events)
		}
	}
	running := w.running
	w.mu.Unlock()
	if !running {
		return nil
	}
	select {
	case <-w.done:
		return w.closeErr
	case <-ctx.Done():
		return fmt.Errorf("close inbox watcher: %w", ctx.Err())
	}
}

func (w *Watcher) startNotify() (*fsnotify.Watcher, error) {
	fsw, err := w.newNotify()
	if err != nil {
		return nil, fmt.Errorf("start fsnotify: %w", err)
	}
	if err := fsw.Add(w.dir); err != nil {
		_ = fsw.Close()
		return nil, fmt.Errorf("watch inbox: %w", err)
	}
	return fsw, nil
}

// run is the loop goroutine: it owns pending and the fsnotify watcher, and is
// the only sender on events.
func (w *Watcher) run(ctx context.Context, initial []item) {
	var notifyDone chan struct{}
	if w.fsw != nil {
		notifyDone = make(chan struct{})
		go func() {
			defer close(notifyDone)
			w.readNotify(ctx)
		}()
	}
	defer func() {
		if w.fsw != nil {
			<-notifyDone
			if err := w.fsw.Close(); err != nil {
				w.closeErr = fmt.Errorf("close fsnotify: %w", err)
			}
		}
		close(w.events)
		close(w.done)
	}()

	if !w.send(ctx, initial) {
		return
	}
	tick := time.NewTicker(max(w.cfg.Settle/4, minTick))
	defer tick.Stop()
	rescan := time.NewTicker(w.rescanEvery())
	defer rescan.Stop()

	for {
		var ready []item
		var err error
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
			if w.notifyLost.Load() && !w.polling {
				w.polling = true
				rescan.Reset(w.rescanEvery())
				w.log.Warn("fsnotify stopped; polling the inbox instead",
					keyPoll, w.cfg.PollInterval)
			}
			names, full, rearm := w.takeHints()
			if rearm {
				w.log.Warn("inbox folder removed or moved; watching it again")
				w.rewatch()
			}
			if full {
				ready, err = w.scan(time.Now())
			} else {
				ready = w.checkNames(names, time.Now())
			}
		case <-tick.C:
			ready = w.checkDue(time.Now())
		case <-rescan.C:
			ready, err = w.scan(time.Now())
		}
		if err != nil {
			w.log.Error("inbox scan failed", keyErr, err)
		}
		if !w.send(ctx, ready) {
			return
		}
	}
}

func (w *Watcher) rescanEvery() time.Duration {
	if w.polling {
		return w.cfg.PollInterval
	}
	return w.cfg.Rescan
}

// send delivers items in order of mtime then name, giving up when ctx is done.
func (w *Watcher) send(ctx context.Context, items []item) bool {
	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.mtime, b.mtime), cmp.Compare(a.ev.Name, b.ev.Name),
			cmp.Compare(a.ev.Path, b.ev.Path))
	})
	for _, it := range items {
		select {
		case w.events <- it.ev:
			w.log.Debug("inbox file delivered", keyKind, it.ev.Kind, keyBatch, it.ev.Name, keyPath, it.ev.Path)
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// readNotify turns fsnotify events into hints for the loop.
func (w *Watcher) readNotify(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				w.lostNotify(ctx)
				return
			}
			w.hint(ev.Name)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				w.lostNotify(ctx)
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.log.Warn("fsnotify queue overflowed; rescanning the inbox")
			} else {
				w.log.Warn("fsnotify error; rescanning the inbox", keyErr, err)
			}
			w.requestRescan()
		}
	}
}

func (w *Watcher) lostNotify(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	w.notifyLost.Store(true)
	w.requestRescan()
}

// hint records that the entry at path may have changed. Any operation counts:
// even a Remove or a Rename away is worth a look, to forget the file.
func (w *Watcher) hint(path string) {
	if filepath.Clean(path) == w.dir {
		// The folder itself was removed or moved, and fsnotify dropped its
		// watch: watch the folder again (recreating it), then rescan.
		w.hintMu.Lock()
		w.rearm = true
		w.hintMu.Unlock()
		w.requestRescan()
		return
	}
	base := filepath.Base(path)
	if _, ok := classify(base); !ok {
		return
	}
	w.hintMu.Lock()
	switch {
	case w.fullRescan:
		// The rescan covers it.
	case len(w.hints) >= maxHints:
		w.fullRescan = true
		w.hints = make(map[string]struct{})
	default:
		w.hints[base] = struct{}{}
	}
	w.hintMu.Unlock()
	w.poke()
}

func (w *Watcher) requestRescan() {
	w.hintMu.Lock()
	w.fullRescan = true
	w.hints = make(map[string]struct{})
	w.hintMu.Unlock()
	w.poke()
}

func (w *Watcher) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Watcher) takeHints() (names map[string]struct{}, full, rearm bool) {
	w.hintMu.Lock()
	defer w.hintMu.Unlock()
	full, rearm = w.fullRescan, w.rearm
	w.fullRescan, w.rearm = false, false
	if full || len(w.hints) == 0 {
		return nil, full, rearm // a full rescan covers the hints
	}
	names = w.hints
	w.hints = make(map[string]struct{})
	return names, false, rearm
}

// scan lists the folder and observes every entry that could be an input or a
// cancel; it forgets pending and delivered files that are gone.
func (w *Watcher) scan(now time.Time) ([]item, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			w.log.Warn("inbox folder disappeared; recreating it")
			w.rewatch()
		}
		return nil, fmt.Errorf("list inbox: %w", err)
	}
	w.gen++
	gen := w.gen
	var ready []item
	for _, e := range entries {
		base := e.Name()
		c, ok := classify(base)
		if !ok {
			continue
		}
		info, err := os.Lstat(filepath.Join(w.dir, base))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				w.log.Warn("stat inbox file", keyPath, filepath.Join(w.dir, base), keyErr, err)
				w.keep(base, gen)
			}
			continue
		}
		if it, ok := w.observe(base, c, info, now, gen); ok {
			ready = append(ready, it)
		}
	}
	w.prune(gen)
	return ready, nil
}

// rewatch creates the inbox folder if it is missing and, unless polling,
// watches it again: after the folder was removed or moved, fsnotify watches
// nothing. Adding a watch that exists is harmless.
func (w *Watcher) rewatch() {
	if err := os.MkdirAll(w.dir, dirPerm); err != nil {
		w.log.Error("recreate inbox", keyErr, err)
		return
	}
	if w.fsw == nil || w.polling {
		return
	}
	if err := w.fsw.Add(w.dir); err != nil {
		w.log.Warn("watch the inbox again; polling instead", keyErr, err)
		w.notifyLost.Store(true)
		w.poke()
	}
}

// checkNames observes the hinted entries.
func (w *Watcher) checkNames(names map[string]struct{}, now time.Time) []item {
	var ready []item
	for base := range names {
		c, ok := classify(base)
		if !ok {
			continue
		}
		path := filepath.Join(w.dir, base)
		info, err := os.Lstat(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				w.drop(base)
			} else {
				w.log.Warn("stat inbox file", keyPath, path, keyErr, err)
			}
			continue
		}
		if it, ok := w.observe(base, c, info, now, w.gen); ok {
			ready = append(ready, it)
		}
	}
	return ready
}

// checkDue observes again every pending input whose version was first seen
// at least Settle ago. Parked inputs wait for a hint or a scan, or for
// IncompleteAfter to pass.
func (w *Watcher) checkDue(now time.Time) []item {
	var ready []item
	for base, p := range w.pending {
		age := now.Sub(p.since)
		if age < w.cfg.Settle || p.parked && age < w.cfg.IncompleteAfter {
			continue
		}
		path := filepath.Join(w.dir, base)
		info, err := os.Lstat(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				delete(w.pending, base)
			} else {
				w.log.Warn("stat inbox file", keyPath, path, keyErr, err)
			}
			continue
		}
		if it, ok := w.observe(base, p.class, info, now, p.gen); ok {
			ready = append(ready, it)
		}
	}
	return ready
}

// observe applies one observation (info, at now) of entry base and returns
// the event to send if the entry is now ready to deliver.
func (w *Watcher) observe(base string, c class, info os.FileInfo, now time.Time, gen uint64) (item, bool) {
	v := versionOf(info)
	code, msg := refusal(c, info)

	w.deliveredMu.Lock()
	d, delivered := w.delivered[base]
	if delivered && d.refused != "" && d.refused != filecontract.CodeIncomplete && code == "" {
		// Refused before, usable now (a link replaced by a file): a new file.
		delete(w.delivered, base)
		d, delivered = deliveredFile{}, false
	}
	if delivered {
		d.gen = gen
		w.delivered[base] = d
	}
	w.deliveredMu.Unlock()

	if code != "" {
		delete(w.pending, base)
		if delivered && d.refused != "" {
			return item{}, false
		}
		return w.refuse(base, c, v, gen, code, msg, info.IsDir())
	}
	if delivered && d.refused != "" {
		return item{}, false // refused as incomplete; the consumer moves it
	}

	if c.kind == watcher.Cancel {
		if delivered {
			return item{}, false
		}
		return w.deliver(base, c, v, gen), true
	}
	if delivered && d.v == v {
		delete(w.pending, base)
		return item{}, false
	}

	p := w.pending[base]
	if p == nil {
		p = &candidate{class: c}
		w.pending[base] = p
	}
	p.gen = gen
	if p.since.IsZero() || p.v != v {
		p.v, p.since, p.parked = v, now, false
		return item{}, false
	}
	if now.Sub(p.since) < w.cfg.Settle {
		return item{}, false
	}

	path := filepath.Join(w.dir, base)
	complete, got, err := tailComplete(path, c.format, v)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		delete(w.pending, base)
		return item{}, false
	case err != nil:
		// Retried on the next hint or scan.
		w.log.Warn("check inbox file", keyPath, path, keyErr, err)
		p.parked = true
		return item{}, false
	case got != v:
		p.v, p.since, p.parked = got, now, false
		return item{}, false
	case !complete && now.Sub(p.since) >= w.cfg.IncompleteAfter:
		delete(w.pending, base)
		return w.refuse(base, c, v, gen, filecontract.CodeIncomplete, incompleteMessage(c.format, w.cfg.IncompleteAfter), false)
	case !complete:
		if !p.parked {
			w.log.Debug("inbox file stable but incomplete; waiting", keyPath, path, keyFmt, c.format)
		}
		p.parked = true
		return item{}, false
	}
	delete(w.pending, base)
	return w.deliver(base, c, v, gen), true
}

// refusal says why the entry c, described by info (from Lstat), cannot be
// taken; "" when it can.
func refusal(c class, info os.FileInfo) (code, msg string) {
	mode := info.Mode()
	switch {
	case mode.IsDir():
		return filecontract.CodeNotRegular, "it is a directory, not an input file"
	case mode&fs.ModeSymlink != 0:
		return filecontract.CodeNotRegular, "it is a symbolic link; batchd follows no links in the inbox (their target may lie outside the data directory): move or copy the file itself in"
	case !mode.IsRegular():
		return filecontract.CodeNotRegular, fmt.Sprintf("it is not a regular file but a %s; batchd reads only regular files", fileType(mode))
	}
	return filecontract.CheckName(c.name)
}

func fileType(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "FIFO"
	case mode&fs.ModeSocket != 0:
		return "socket"
	case mode&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

func incompleteMessage(format string, grace time.Duration) string {
	end := "no final newline"
	if format == filecontract.FormatJSON {
		end = "its last non-blank character is not '}'"
	}
	return fmt.Sprintf("%s after %v unchanged; the input is taken as unfinished: write the file elsewhere (or under a dot-name) and rename it into the inbox", end, grace)
}

// refuse records base as refused and returns its Refused event. A
// directory, or a cancel request, is only logged (once while it stays).
func (w *Watcher) refuse(base string, c class, v version, gen uint64, code, msg string, isDir bool) (item, bool) {
	w.deliveredMu.Lock()
	w.delivered[base] = deliveredFile{v: v, gen: gen, refused: code}
	w.deliveredMu.Unlock()
	path := filepath.Join(w.dir, base)
	if isDir || c.kind == watcher.Cancel {
		w.log.Warn("inbox entry ignored", keyPath, path, keyKind, c.kind, keyCode, code, keyMsg, msg)
		return item{}, false
	}
	name := filecontract.SafeName(c.name)
	w.log.Warn("inbox file refused", keyPath, path, keyBatch, name, keyCode, code, keyMsg, msg)
	return item{
		ev: watcher.Event{Kind: watcher.Refused, Name: name, Path: path, Format: c.format,
			Code: code, Message: msg},
		mtime: v.mtime,
	}, true
}

// deliver records v of base as delivered and returns its event.
func (w *Watcher) deliver(base string, c class, v version, gen uint64) item {
	w.deliveredMu.Lock()
	w.delivered[base] = deliveredFile{v: v, gen: gen}
	w.deliveredMu.Unlock()
	return item{
		ev:    watcher.Event{Kind: c.kind, Name: c.name, Path: filepath.Join(w.dir, base), Format: c.format},
		mtime: v.mtime,
	}
}

// keep marks what is known of base as seen by scan gen, when it could not be
// stat'ed for a reason other than its absence.
func (w *Watcher) keep(base string, gen uint64) {
	if p := w.pending[base]; p != nil {
		p.gen = gen
	}
	w.deliveredMu.Lock()
	if d, ok := w.delivered[base]; ok {
		d.gen = gen
		w.delivered[base] = d
	}
	w.deliveredMu.Unlock()
}

// drop forgets base, which is gone.
func (w *Watcher) drop(base string) {
	delete(w.pending, base)
	w.deliveredMu.Lock()
	delete(w.delivered, base)
	w.deliveredMu.Unlock()
}

// prune forgets what scan gen did not see.
func (w *Watcher) prune(gen uint64) {
	for base, p := range w.pending {
		if p.gen != gen {
			delete(w.pending, base)
		}
	}
	w.deliveredMu.Lock()
	for base, d := range w.delivered {
		if d.gen != gen {
			delete(w.delivered, base)
		}
	}
	w.deliveredMu.Unlock()
}
