package lazyfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// rig is a mounted lazyfs over a backing dir seeded with files.
type rig struct {
	t            *testing.T
	backing, mnt string
	fs           *FS
}

func mount(t *testing.T, opt Options, seed map[string]string) *rig {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("BATCHD_REQUIRE_FUSE") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	r := &rig{t: t, backing: t.TempDir(), mnt: t.TempDir()}
	for name, data := range seed {
		p := filepath.Join(r.backing, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opt.StateDir = t.TempDir()
	f, err := Mount(r.backing, r.mnt, opt)
	if err != nil {
		t.Fatal(err)
	}
	r.fs = f
	// Before TempDir's removals (cleanups run last first); a cut also
	// detaches a mount a test left busy.
	t.Cleanup(func() { _ = f.PowerCut() })
	return r
}

func (r *rig) path(name string) string { return filepath.Join(r.mnt, name) }

// write replaces name's content through the mount, fsyncing it if asked.
func (r *rig) write(name, data string, fsync bool) {
	r.t.Helper()
	f, err := os.OpenFile(r.path(name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		r.t.Fatal(err)
	}
	if fsync {
		if err := f.Sync(); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		r.t.Fatal(err)
	}
}

// syncDir fsyncs a directory of the mount, as fsx.SyncDir does.
func (r *rig) syncDir(name string) {
	r.t.Helper()
	d, err := os.Open(r.path(name))
	if err != nil {
		r.t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		r.t.Fatalf("sync dir %s: %v", name, err)
	}
}

func (r *rig) do(err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) cut() {
	r.t.Helper()
	if err := r.fs.PowerCut(); err != nil {
		r.t.Fatal(err)
	}
}

// after reads name in the backing dir after a cut; "" with false if absent.
func (r *rig) after(name string) (string, bool) {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.backing, name))
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return string(b), true
}

func (r *rig) want(name, data string) {
	r.t.Helper()
	got, ok := r.after(name)
	if !ok {
		r.t.Fatalf("%s is gone after the cut; want %q", name, data)
	}
	if got != data {
		r.t.Fatalf("%s after the cut = %q; want %q", name, got, data)
	}
}

func (r *rig) gone(name string) {
	r.t.Helper()
	if got, ok := r.after(name); ok {
		r.t.Fatalf("%s survived the cut with %q; want it gone", name, got)
	}
}

func TestUnsyncedWriteDropped(t *testing.T) {
	r := mount(t, Options{}, map[string]string{"old": "mount-time"})
	r.write("a", "first", true)
	r.syncDir(".")
	r.write("a", "second, never synced", false)
	r.write("old", "overwritten, never synced", false)
	r.cut()
	r.want("a", "first")
	r.want("old", "mount-time")
}

func TestFsyncedDataKept(t *testing.T) {
	r := mount(t, Options{}, map[string]string{"old": "mount-time content"})
	r.write("a", "kept", true)
	r.syncDir(".")
	// An fsync after a shrink and a partial rewrite keeps exactly the file.
	f, err := os.OpenFile(r.path("old"), os.O_RDWR, 0)
	r.do(err)
	r.do(f.Truncate(4))
	_, err = f.WriteAt([]byte("M"), 0)
	r.do(err)
	_, err = f.WriteAt([]byte("!"), 8) // a hole of zeros at 4..8
	r.do(err)
	r.do(f.Sync())
	r.do(f.Close())
	r.cut()
	r.want("a", "kept")
	r.want("old", "Moun\x00\x00\x00\x00!")
}

// An fsync makes a file's modification time durable with its data (batchd
// compares a result file's mtime with the one its ledger recorded); an
// unsynced change of either is lost with the power.
func TestFsyncedMtimeKept(t *testing.T) {
	r := mount(t, Options{}, map[string]string{"old": "mount-time"})
	then := time.Date(2021, 3, 4, 5, 6, 7, 891011000, time.UTC)
	oldTime := then.Add(-time.Hour)
	r.do(os.Chtimes(filepath.Join(r.backing, "old"), oldTime, oldTime))
	// The mount saw the backing file before the Chtimes above: remount.
	r.do(r.fs.Unmount())
	f, err := Mount(r.backing, r.mnt, Options{StateDir: t.TempDir()})
	r.do(err)
	r.fs = f
	r.write("a", "kept", true)
	r.do(os.Chtimes(r.path("a"), then, then))
	g, err := os.OpenFile(r.path("a"), os.O_WRONLY, 0)
	r.do(err)
	r.do(g.Sync())
	r.do(g.Close())
	r.syncDir(".")
	r.write("a", "later, never synced", false)
	r.write("old", "overwritten, never synced", false)
	r.cut()
	r.want("a", "kept")
	r.want("old", "mount-time")
	for name, want := range map[string]time.Time{"a": then, "old": oldTime} {
		st, err := os.Stat(filepath.Join(r.backing, name))
		r.do(err)
		if !st.ModTime().Equal(want) {
			t.Errorf("%s: modification time %v after the cut, want %v", name, st.ModTime(), want)
		}
	}
}

func TestFileSyncedDirNotIsGone(t *testing.T) {
	r := mount(t, Options{}, nil)
	r.do(os.Mkdir(r.path("d"), 0o755))
	r.syncDir(".")
	r.write("d/a", "data", true)
	r.write("b", "data", true)
	r.syncDir("d") // d's entry a is durable; the root's b is not
	r.cut()
	r.want("d/a", "data")
	r.gone("b")
}

func TestDirSyncedFileNotIsEmpty(t *testing.T) {
	r := mount(t, Options{}, nil)
	r.write("a", "unsynced data", false)
	r.syncDir(".")
	r.cut()
	r.want("a", "")
}

func TestMkdirUnsyncedIsGone(t *testing.T) {
	r := mount(t, Options{}, nil)
	r.do(os.Mkdir(r.path("kept"), 0o755))
	r.syncDir(".")
	r.do(os.Mkdir(r.path("lost"), 0o755))
	r.do(os.Mkdir(r.path("kept/inner"), 0o755)) // kept not synced since
	r.cut()
	if st, err := os.Stat(filepath.Join(r.backing, "kept")); err != nil || !st.IsDir() {
		t.Fatalf("synced mkdir: %v", err)
	}
	for _, name := range []string{"lost", "kept/inner"} {
		if _, err := os.Lstat(filepath.Join(r.backing, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("unsynced mkdir %s: stat = %v; want it gone", name, err)
		}
	}
}

func TestRmdirUnsyncedIsUndone(t *testing.T) {
	r := mount(t, Options{}, map[string]string{"d/x": "x"})
	r.do(os.Remove(r.path("d/x")))
	r.syncDir("d")
	r.do(os.Remove(r.path("d")))
	r.cut()
	r.gone("d/x")
	if st, err := os.Stat(filepath.Join(r.backing, "d")); err != nil || !st.IsDir() {
		t.Fatalf("unsynced rmdir: %v; want d back", err)
	}
}

func TestRenameUnsyncedIsUndone(t *testing.T) {
	r := mount(t, Options{}, map[string]string{"old": "durable"})
	r.do(os.Rename(r.path("old"), r.path("new")))
	r.write("new", "rewritten and fsynced under the new name", true)
	r.cut()
	// The node keeps its fsynced content, but under its durable name.
	r.want("old", "rewritten and fsynced under the new name")
	r.gone("new")
}

func TestRenameUnsyncedKeepsOldContent(t *testing.T) {
	r := mount(t, Options{}, map[string]string{"old": "durable"})
	r.do(os.Rename(r.path("old"), r.path("new")))
	r.write("new", "never synced", false)
	r.cut()
	r.want("old", "durable")
	r.gone("new")
}

func TestRenameAcrossDirsEachSideOnItsOwn(t *testing.T) {
	seed := map[string]string{"src/f": "data", "dst/keep": "k"}
	for _, tc := range []struct {
		sync     []string
		src, dst bool // f survives at src/f, at dst/f
	}{
		{nil, true, false},
		{[]string{"src", "dst"}, false, true},
		{[]string{"dst"}, true, true},   // at both names: a hard link
		{[]string{"src"}, false, false}, // at neither
	} {
		t.Run(strings.Join(tc.sync, "+"), func(t *testing.T) {
			r := mount(t, Options{}, seed)
			r.do(os.Rename(r.path("src/f"), r.path("dst/f")))
			for _, d := range tc.sync {
				r.syncDir(d)
			}
			r.cut()
			for _, c := range []struct {
				name string
				want bool
			}{{"src/f", tc.src}, {"dst/f", tc.dst}} {
				if got, ok := r.after(c.name); ok != c.want || (ok && got != "data") {
					t.Errorf("%s after the cut: present %v (%q); want present %v", c.name, ok, got, c.want)
				}
			}
			if tc.src && tc.dst {
				sameFile(t, filepath.Join(r.backing, "src/f"), filepath.Join(r.backing, "dst/f"))
			}
		})
	}
}

func TestUnlinkUnsyncedIsUndone(t *testing.T) {
	r := mount(t, Options{}, map[string]string{"old": "durable"})
	r.write("made", "synced", true)
	r.syncDir(".")
	r.do(os.Remove(r.path("old")))
	r.do(os.Remove(r.path("made")))
	r.cut()
	r.want("old", "durable")
	r.want("made", "synced")
}

func TestUnlinkSyncedIsDone(t *testing.T) {
	r := mount(t, Options{}, map[string]string{"old": "durable"})
	r.do(os.Remove(r.path("old")))
	r.syncDir(".")
	r.cut()
	r.gone("old")
}

func TestHardLinkRestoredAsLink(t *testing.T) {
	r := mount(t, Options{}, map[string]string{"pre1": "p"})
	r.do(os.Link(r.path("pre1"), r.path("pre2")))
	r.write("a", "linked", true)
	r.do(os.Link(r.path("a"), r.path("b")))
	r.do(os.Link(r.path("a"), r.path("unsynced")))
	r.syncDir(".")
	r.do(os.Link(r.path("a"), r.path("late")))
	r.cut()
	r.want("a", "linked")
	r.want("b", "linked")
	r.want("unsynced", "linked")
	r.gone("late")
	sameFile(t, filepath.Join(r.backing, "a"), filepath.Join(r.backing, "b"))
	sameFile(t, filepath.Join(r.backing, "a"), filepath.Join(r.backing, "unsynced"))
	sameFile(t, filepath.Join(r.backing, "pre1"), filepath.Join(r.backing, "pre2"))
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	sa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(sa, sb) {
		t.Fatalf("%s and %s are not one file", a, b)
	}
}

func TestTornAtPageBoundaries(t *testing.T) {
	durable := bytes.Repeat([]byte("a"), 4*pageSize)
	run := func(seed uint64) []byte {
		t.Helper()
		r := mount(t, Options{Torn: true, Seed: seed}, map[string]string{"f": string(durable)})
		f, err := os.OpenFile(r.path("f"), os.O_RDWR, 0)
		r.do(err)
		// Unaligned, across pages 0..2, and an append of pages 4..5.
		_, err = f.WriteAt(bytes.Repeat([]byte("b"), 2*pageSize), 1000)
		r.do(err)
		_, err = f.WriteAt(bytes.Repeat([]byte("c"), 2*pageSize), 4*pageSize)
		r.do(err)
		r.do(f.Close())
		r.cut()
		got, _ := r.after("f")
		return []byte(got)
	}
	current := bytes.Clone(durable)
	copy(current[1000:], bytes.Repeat([]byte("b"), 2*pageSize))
	current = append(current, bytes.Repeat([]byte("c"), 2*pageSize)...)

	mixed := false
	for seed := uint64(1); seed <= 8; seed++ {
		got := run(seed)
		if again := run(seed); !bytes.Equal(got, again) {
			t.Fatalf("seed %d tore two ways", seed)
		}
		if len(got) != len(durable) && len(got) != len(current) {
			t.Fatalf("seed %d: size %d; want the durable %d or the current %d", seed, len(got), len(durable), len(current))
		}
		var kept, lost int
		for p := 0; p*pageSize < len(got); p++ {
			page := got[p*pageSize : (p+1)*pageSize]
			cur := current[p*pageSize : (p+1)*pageSize]
			dur := make([]byte, pageSize)
			if p*pageSize < len(durable) {
				copy(dur, durable[p*pageSize:])
			}
			switch {
			case bytes.Equal(page, cur) && !bytes.Equal(page, dur):
				kept++
			case bytes.Equal(page, dur):
				if !bytes.Equal(page, cur) {
					lost++
				}
			default:
				t.Fatalf("seed %d: page %d is neither its durable nor its current content: torn inside a page", seed, p)
			}
		}
		mixed = mixed || (kept > 0 && lost > 0)
	}
	if !mixed {
		t.Fatal("no seed kept some unsynced pages and lost others")
	}
}

func TestOnOpFreezes(t *testing.T) {
	r := mount(t, Options{}, nil)
	fired := make(chan int64, 1)
	n := r.fs.Ops() + 3
	r.fs.OnOp(n, func() { fired <- r.fs.Ops() })
	r.do(os.Mkdir(r.path("one"), 0o755)) // op n-2
	r.do(os.Mkdir(r.path("two"), 0o755)) // op n-1
	if err := os.Mkdir(r.path("three"), 0o755); !errors.Is(err, syscall.EIO) {
		t.Fatalf("op n: mkdir = %v; want EIO", err)
	}
	if got := <-fired; got != n {
		t.Fatalf("fn ran at op %d; want %d", got, n)
	}
	if !r.fs.Frozen() {
		t.Fatal("not frozen after op n")
	}
	if err := os.Mkdir(r.path("four"), 0o755); !errors.Is(err, syscall.EIO) {
		t.Fatalf("after op n: mkdir = %v; want EIO", err)
	}
	if err := os.WriteFile(r.path("one/f"), nil, 0o644); !errors.Is(err, syscall.EIO) {
		t.Fatalf("after op n: create = %v; want EIO", err)
	}
	if err := os.Chmod(r.path("one"), 0o700); !errors.Is(err, syscall.EIO) {
		t.Fatalf("after op n: chmod = %v; want EIO", err)
	}
	// Reads still answer, from the frozen state.
	if ents, err := os.ReadDir(r.mnt); err != nil || len(ents) != 2 {
		t.Fatalf("after op n: readdir = %v, %v; want one and two", ents, err)
	}
	for name, want := range map[string]bool{"one": true, "two": true, "three": false, "four": false, "one/f": false} {
		if _, err := os.Stat(filepath.Join(r.backing, name)); (err == nil) != want {
			t.Errorf("backing %s before the cut: stat = %v; want present %v", name, err, want)
		}
	}
	select {
	case <-fired:
		t.Fatal("fn ran twice")
	default:
	}
}

// boltHelper names the helper's step in its environment. bbolt runs in a
// child process, as the daemon will: a process that mmaps files served by
// its own FUSE server can deadlock (a fault holds the mm lock the server's
// read of the request may need).
const boltHelper = "LAZYFS_BOLT_HELPER"

// TestBoltHelper is the child: it runs one step on the database at
// LAZYFS_BOLT_DB and exits.
func TestBoltHelper(t *testing.T) {
	step := os.Getenv(boltHelper)
	if step == "" {
		t.Skip("the child process of the bbolt tests")
	}
	db, err := bolt.Open(os.Getenv("LAZYFS_BOLT_DB"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	switch step {
	case "setup": // five batches, read back through the mmap
		for i := range 5 {
			if err := putBatch(db, i); err != nil {
				t.Fatal(err)
			}
		}
		err = db.View(func(tx *bolt.Tx) error {
			if v := tx.Bucket([]byte("b")).Get([]byte("k4-49")); len(v) != 300 {
				return fmt.Errorf("read back %d bytes", len(v))
			}
			return nil
		})
	case "nosync":
		db.NoSync = true
		err = putBatch(db, 5)
	case "batch5":
		err = putBatch(db, 5)
	}
	if err != nil {
		t.Fatal(err)
	}
	os.Exit(0) // no Close: a crash closes nothing either
}

// bolt starts the helper's step on the mount's database; its output
// goes to out. The caller waits.
func (r *rig) bolt(step string, out *bytes.Buffer) *exec.Cmd {
	r.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBoltHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), boltHelper+"="+step, "LAZYFS_BOLT_DB="+r.path("ledger.db"))
	cmd.Stdout, cmd.Stderr = out, out
	r.do(cmd.Start())
	return cmd
}

// boltStep runs the helper's step to its end.
func (r *rig) boltStep(step string) {
	r.t.Helper()
	var out bytes.Buffer
	if err := r.bolt(step, &out).Wait(); err != nil {
		r.t.Fatalf("bbolt %s: %v\n%s", step, err, out.Bytes())
	}
}

// openBolt makes a bbolt database on the mount (flock, a read-only mmap,
// pwrite and fdatasync) with five committed batches, its name durable.
func openBolt(r *rig) {
	r.t.Helper()
	r.boltStep("setup")
	r.syncDir(".") // bbolt does not sync the directory of a new file
}

// putBatch commits 50 keys of batch i.
func putBatch(db *bolt.DB, i int) error {
	return db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		for j := range 50 {
			if err := b.Put(fmt.Appendf(nil, "k%d-%d", i, j), bytes.Repeat([]byte{byte(i)}, 300)); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkBolt reopens the database from the backing dir after a cut: it must
// check clean, hold batches 0..4 whole, and batch 5 whole or not at all.
// It returns whether batch 5 is there.
func checkBolt(r *rig) bool {
	r.t.Helper()
	db, err := bolt.Open(filepath.Join(r.backing, "ledger.db"), 0o600, nil)
	r.do(err)
	defer db.Close()
	present := 0
	r.do(db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			r.t.Errorf("check: %v", err)
		}
		b := tx.Bucket([]byte("b"))
		if b == nil {
			return errors.New("bucket gone")
		}
		for i := range 6 {
			for j := range 50 {
				v := b.Get(fmt.Appendf(nil, "k%d-%d", i, j))
				switch {
				case i == 5 && v != nil:
					present++
				case i < 5 && !bytes.Equal(v, bytes.Repeat([]byte{byte(i)}, 300)):
					r.t.Errorf("committed k%d-%d = %d bytes", i, j, len(v))
				}
			}
		}
		return nil
	}))
	if present != 0 && present != 50 {
		r.t.Errorf("batch 5 is half there: %d keys of 50", present)
	}
	return present == 50
}

// TestBoltNoSyncDropped: a transaction committed with NoSync made nothing
// durable, so a cut drops it and the file checks clean.
func TestBoltNoSyncDropped(t *testing.T) {
	r := mount(t, Options{}, nil)
	openBolt(r)
	r.boltStep("nosync")
	r.cut()
	if checkBolt(r) {
		t.Fatal("the NoSync transaction survived the cut")
	}
}

// TestBoltCrashAtEveryCommitOp kills the process at each mutating op of a
// commit in turn and cuts power, torn or not: bbolt must come back clean
// with the commit whole or absent, and whole once it returned.
func TestBoltCrashAtEveryCommitOp(t *testing.T) {
	for _, torn := range []bool{false, true} {
		for k := int64(1); k <= 1000; k++ { // a bound for -run filters
			finished := false
			ran := t.Run(fmt.Sprintf("torn=%v/op=%d", torn, k), func(t *testing.T) {
				r := mount(t, Options{Torn: torn, Seed: uint64(k)}, nil)
				openBolt(r)
				fired := make(chan struct{})
				child := make(chan *os.Process, 1)
				r.fs.OnOp(r.fs.Ops()+k, func() {
					(<-child).Kill() // as the daemon's test will
					close(fired)
				})
				var out bytes.Buffer
				cmd := r.bolt("batch5", &out)
				child <- cmd.Process
				err := cmd.Wait()
				if r.fs.Frozen() {
					<-fired
				} else if err != nil {
					t.Fatalf("bbolt batch5: %v\n%s", err, out.Bytes())
				} else {
					finished = true
				}
				r.cut()
				if got := checkBolt(r); finished && !got {
					t.Fatal("a finished commit is gone")
				}
			})
			if !ran || finished {
				if finished && k < 4 {
					t.Fatalf("a commit took only %d ops", k-1)
				}
				t.Logf("torn=%v: a commit is %d ops", torn, k-1)
				break
			}
		}
	}
}
