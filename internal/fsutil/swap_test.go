package fsutil

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestWriteFileSwapReusesTwoInodes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	swap := SwapName(path)
	if swap != filepath.Join(dir, ".state.swap") {
		t.Fatalf("SwapName = %s", swap)
	}
	if err := WriteFileSwap(path, []byte("v0"), 0o600); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, "v0", 0o600)
	assertOnly(t, dir, "state") // the first write renames its companion
	if err := WriteFileSwap(path, []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, "v1", 0o600)
	assertFile(t, swap, "v0", 0o600) // the exchange left the old content there
	inodes := map[uint64]bool{inode(t, path): true, inode(t, swap): true}
	for i := 2; i < 10; i++ {
		want := "v" + strings.Repeat("x", 10-i) // shorter each time: truncation matters
		before := inode(t, swap)
		if err := WriteFileSwap(path, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		assertFile(t, path, want, 0o600)
		if got := inode(t, path); got != before {
			t.Fatalf("write %d: path has inode %d, want the companion's %d", i, got, before)
		}
		if !inodes[inode(t, swap)] {
			t.Fatalf("write %d: the companion is a new inode", i)
		}
	}
	assertOnly(t, dir, ".state.swap", "state")
}

func TestWriteFileSwapChangesMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	for _, perm := range []os.FileMode{0o600, 0o600, 0o644} {
		if err := WriteFileSwap(path, []byte(perm.String()), perm, NoSync(true)); err != nil {
			t.Fatal(err)
		}
		assertFile(t, path, perm.String(), perm)
	}
}

func TestWriteFileSwapRefusesDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := os.MkdirAll(filepath.Join(path, "inner"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileSwap(path, []byte("x"), 0o600); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("err = %v, want one saying path is a directory", err)
	}
	if fi, err := os.Stat(filepath.Join(path, "inner")); err != nil || !fi.IsDir() {
		t.Fatalf("directory damaged: %v", err)
	}
	assertOnly(t, dir, "state")
}

func TestWriteFileSwapRefusesLinkedCompanion(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := WriteFileSwap(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(elsewhere, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, SwapName(path)); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileSwap(path, []byte("new"), 0o600); err == nil {
		t.Fatal("a write through a symbolic link at the companion succeeded")
	}
	assertFile(t, path, "old", 0o600)
	assertFile(t, elsewhere, "keep", 0o600)
}

func TestWriteFileSwapReplacesSymlinkAtPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileSwap(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("path is not a regular file after the write: %v", err)
	}
	assertFile(t, path, "new", 0o600)
	assertFile(t, target, "keep", 0o600)
}
