package fsutil

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteFileAtomicCreatesAndReplaces(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{name: "synced"},
		{name: "no sync", opts: []Option{NoSync(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state")
			if err := WriteFileAtomic(path, []byte("one"), 0o600, tc.opts...); err != nil {
				t.Fatal(err)
			}
			if err := WriteFileAtomic(path, []byte("two"), 0o644, tc.opts...); err != nil {
				t.Fatal(err)
			}
			assertFile(t, path, "two", 0o644)
			assertOnly(t, dir, "state")
		})
	}
}

func TestWriteFileAtomicModeIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "hosts")
	if err := WriteFileAtomic(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, "x", 0o644)
}

func TestWriteFileAtomicRelativePath(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := WriteFileAtomic("rel", []byte("r"), 0o600); err != nil {
		t.Fatal(err)
	}
	assertFile(t, "rel", "r", 0o600)
	assertOnly(t, ".", "rel")
}

func TestWriteFileAtomicUnwritableDirectory(t *testing.T) {
	base := t.TempDir()
	notDir := filepath.Join(base, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		path string
		is   error
	}{
		{name: "missing directory", path: filepath.Join(base, "missing", "state"), is: fs.ErrNotExist},
		{name: "parent is a file", path: filepath.Join(notDir, "state"), is: syscall.ENOTDIR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := WriteFileAtomic(tc.path, []byte("x"), 0o600)
			if !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("err %q does not name %s", err, tc.path)
			}
		})
	}
}

func TestWriteAtomicRenameFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint")
	if err := WriteFileAtomic(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("rename refused")
	failRename := func(o *options) { o.rename = func(string, string) error { return boom } }
	err := WriteFileAtomic(path, []byte("new"), 0o600, failRename)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want %v naming %s", err, boom, path)
	}
	assertFile(t, path, "old", 0o600)
	assertOnly(t, dir, "checkpoint")
}

func TestWriteAtomicRenameOverDirectoryFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := os.MkdirAll(filepath.Join(path, "inner"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, []byte("x"), 0o600); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	if fi, err := os.Stat(filepath.Join(path, "inner")); err != nil || !fi.IsDir() {
		t.Fatalf("directory damaged: %v", err)
	}
	assertOnly(t, dir, "state")
}

func TestWriteAtomicWriterErrorKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log.gz")
	if err := WriteFileAtomic(path, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("source vanished")
	err := WriteAtomic(path, 0o640, func(w io.Writer) error {
		if _, err := w.Write([]byte("half")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
	assertFile(t, path, "old", 0o640)
	assertOnly(t, dir, "log.gz")
}

func TestWriteAtomicStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	want := bytes.Repeat([]byte("0123456789"), 100_000)
	err := WriteAtomic(path, 0o600, func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(want))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, string(want), 0o600)
}

func assertFile(t *testing.T, path, want string, perm fs.FileMode) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s holds %d bytes %.20q, want %d bytes %.20q", path, len(got), got, len(want), want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != perm {
		t.Fatalf("%s mode %v, want %v", path, fi.Mode(), perm)
	}
}

// assertOnly checks that no temporary file is left beside the target.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
}
