package daemon_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
)

// openFails opens a daemon on cfg that must fail, and returns its error.
func openFails(t *testing.T, cfg daemon.Config) error {
	t.Helper()
	d := daemon.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := d.Open(context.Background())
	if err == nil {
		closeDaemon(t, d)
		t.Fatal("the daemon opened")
	}
	return err
}

// snapshot is what a folder or file holds: a file's content, or a folder's
// entries with their contents.
func snapshot(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(path, func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		raw, err := os.ReadFile(p)
		out[strings.TrimPrefix(p, path)] = string(raw)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A link planted where batchd keeps its own files or folders (to a file or
// a folder outside the data directory) stops the start with an error that
// names it, and nothing outside is read or written through it: not the
// lock's pid, an in-flight table cut short, a report read as a crash, a
// ledger opened, or webhook events, batch results and outputs written.
func TestLinksInTheDataDirectoryAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  bool
	}{
		{"state/batchd.lock", false},
		{"state/inflight", false},
		{"state/crash.log", false},
		{"state/ledger.db", false},
		{"state/webhooks", true},
		{"state/batches", true},
		{"state", true},
		{"outbox", true},
		{"done", true},
	} {
		t.Run(strings.ReplaceAll(tc.name, "/", "_"), func(t *testing.T) {
			e := newEnv(t, openaitest.Options{})
			cfg := e.config()
			cfg.Webhooks.URLs, cfg.Webhooks.Secret = []string{e.url + "/hook"}, "test-secret"
			// The target holds what would matter if it were followed: a
			// crash report, a pid, an in-flight slot.
			target := filepath.Join(t.TempDir(), "target")
			const keep = "panic: not batchd's\n4242\nR\x00\x00\x00\x01\x07batch_x\n"
			if tc.dir {
				if err := os.Mkdir(target, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(target, "keep"), []byte(keep), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(target, []byte(keep), 0o644); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, target)
			link := filepath.Join(e.dirs.Root, tc.name)
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			err := openFails(t, cfg)
			if !errors.Is(err, fsx.ErrLink) || !strings.Contains(err.Error(), link) {
				t.Errorf("error %q does not refuse the link at %s", err, link)
			}
			if after := snapshot(t, target); !maps.Equal(before, after) {
				t.Errorf("the link's target changed: %q, was %q", after, before)
			}
			if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the link was moved or replaced: %v", err)
			}
		})
	}
}

// An inbox that is a link to another daemon's inbox is refused: two daemons
// never run the same inputs. The refused one takes nothing in its own data
// directory either.
func TestInboxLinkedToAnotherDaemonsInboxIsRefused(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.config())
	other := daemon.DataDirs(t.TempDir())
	if err := os.Symlink(e.dirs.Inbox, other.Inbox); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.Data = other.Root
	err := openFails(t, cfg)
	if !errors.Is(err, fsx.ErrLink) || !strings.Contains(err.Error(), other.Inbox) {
		t.Errorf("error %q does not refuse the linked inbox %s", err, other.Inbox)
	}
	ents, _ := os.ReadDir(other.Root)
	if names := entryNames(ents); !slices.Equal(names, []string{"inbox"}) {
		t.Errorf("the refused daemon made %v in its data directory", names)
	}
	// The first daemon runs what its inbox holds.
	e.drop("mine.jsonl", chatBatch(3, "a"))
	if o := e.waitEnded("mine", "jsonl"); o.Status != pipeline.StatusCompleted {
		t.Errorf("status %s", o.Status)
	}
}

func entryNames(ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// The data directory itself may be a link (an operator's choice of path);
// only the folders in it may not.
func TestDataDirectoryMayBeALink(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	cfg := e.config()
	cfg.Data = filepath.Join(t.TempDir(), "data")
	if err := os.Symlink(e.dirs.Root, cfg.Data); err != nil {
		t.Fatal(err)
	}
	e.open(cfg)
	e.drop("via.jsonl", chatBatch(3, "a"))
	if o := e.waitEnded("via", "jsonl"); o.Status != pipeline.StatusCompleted {
		t.Errorf("status %s", o.Status)
	}
}

// With the lock file removed under a running daemon, a second daemon on
// the same data directory still fails before it writes anything: the
// ledger's lock is taken before the outbox's temporaries are cleaned and
// the recorded HTTP address removed, so the first daemon's stay.
func TestSecondDaemonWithTheLockFileRemovedChangesNothing(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	e.open(cfg)
	addr, err := os.ReadFile(daemon.AddrFile(e.dirs))
	if err != nil {
		t.Fatal(err)
	}
	// A result the first daemon is publishing (a temporary beside it).
	tmp := filepath.Join(e.dirs.Outbox, ".first.output.jsonl.tmp")
	if err := os.WriteFile(tmp, []byte("partial\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(e.dirs.State, "batchd.lock")); err != nil {
		t.Fatal(err)
	}
	err = openFails(t, cfg)
	if !errors.Is(err, daemon.ErrInUse) || !errors.Is(err, ledger.ErrLocked) {
		t.Errorf("error %v is not ErrInUse for the held ledger", err)
	}
	if got, err := os.ReadFile(tmp); err != nil || string(got) != "partial\n" {
		t.Errorf("the first daemon's outbox temporary: %q, %v", got, err)
	}
	if got, err := os.ReadFile(daemon.AddrFile(e.dirs)); err != nil || string(got) != string(addr) {
		t.Errorf("the first daemon's http.addr: %q, %v; was %q", got, err, addr)
	}
	if got, _ := os.ReadFile(filepath.Join(e.dirs.State, "batchd.lock")); len(got) != 0 {
		t.Errorf("the refused daemon recorded its pid: %q", got)
	}
	e.drop("after.jsonl", chatBatch(3, "a"))
	if o := e.waitEnded("after", "jsonl"); o.Status != pipeline.StatusCompleted {
		t.Errorf("status %s", o.Status)
	}
}
