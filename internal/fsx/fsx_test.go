package fsx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Concurrent writers of one path each replace it whole and leave no
// temporary file behind.
func TestWriteFileConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.json")
	contents := []string{"aaaa", "bbbbbbbb", "c"}
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := WriteFile(path, []byte(contents[i%3]), i%2 == 0); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ok := false
	for _, c := range contents {
		ok = ok || string(got) == c
	}
	if !ok {
		t.Fatalf("file holds %q, not one whole write", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d entries left, want only x.json", len(ents))
	}
}

func TestCopyFile(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(src, []byte("data"), 0o644)
	os.WriteFile(dst, []byte("longer old content"), 0o644)
	if err := CopyFile(src, dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); string(got) != "data" {
		t.Fatalf("copy holds %q", got)
	}
	if err := CopyFile(filepath.Join(dir, "missing"), dst); err == nil {
		t.Fatal("copying a missing file succeeded")
	}
}

func TestCopyPrefix(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(src, []byte("committed|torn"), 0o644)
	if err := CopyPrefix(src, dst, 9); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); string(got) != "committed" {
		t.Fatalf("prefix copy holds %q", got)
	}
	if err := CopyPrefix(src, dst, 100); err == nil {
		t.Fatal("copying more than the file holds succeeded")
	}
}

// A link at the destination is an error: CopyFile never writes through it.
func TestCopyFileRefusesALinkAtTheDestination(t *testing.T) {
	dir := t.TempDir()
	src, target, dst := filepath.Join(dir, "src"), filepath.Join(dir, "outside"), filepath.Join(dir, "dst")
	if err := os.WriteFile(src, []byte("results\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, dst); err != nil {
		t.Fatal(err)
	}
	if err := CopyFile(src, dst); err == nil {
		t.Fatal("CopyFile wrote through a link at its destination")
	}
	if got, _ := os.ReadFile(target); string(got) != "keep me\n" {
		t.Fatalf("the link's target changed: %q", got)
	}
}

// MkdirAll creates every missing level, takes an existing directory as
// done (also when many callers race), and refuses a file in the way.
// That each level is durable is shown on a filesystem that forgets what
// was not fsynced (cmd/batchd TestPowerCut*).
func TestMkdirAll(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b", "c")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = MkdirAll(deep, 0o755)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat(deep); err != nil || !st.IsDir() {
		t.Fatalf("%s: %v", deep, err)
	}
	file := filepath.Join(root, "a", "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(file, "x"), 0o755); err == nil {
		t.Fatal("MkdirAll under a file succeeded")
	}
	if err := MkdirAll(file, 0o755); err == nil {
		t.Fatal("MkdirAll of a file succeeded")
	}
}

// OpenNoFollow and NoLink refuse a link at the path, naming it, and leave
// the link's target as it was.
func TestOpenNoFollowAndNoLinkRefuseALink(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(t.TempDir(), "none"), dangling); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, dangling} {
		f, err := OpenNoFollow(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err == nil {
			f.Close()
			t.Fatalf("%s: a link was opened", p)
		}
		if !errors.Is(err, ErrLink) || !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not wrap ErrLink or name %s", err, p)
		}
		if err := NoLink(p); !errors.Is(err, ErrLink) || !strings.Contains(err.Error(), p) {
			t.Errorf("NoLink(%s) = %v", p, err)
		}
	}
	if got, _ := os.ReadFile(outside); string(got) != "keep" {
		t.Fatalf("the link's target holds %q", got)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(outside), "none")); err == nil {
		t.Fatal("the dangling link's target was created")
	}
	regular := filepath.Join(dir, "regular")
	f, err := OpenNoFollow(regular, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, p := range []string{regular, dir, filepath.Join(dir, "missing")} {
		if err := NoLink(p); err != nil {
			t.Errorf("NoLink(%s) = %v", p, err)
		}
	}
}
