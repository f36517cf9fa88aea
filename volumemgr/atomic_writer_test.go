package volumemgr

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var epoch = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

func files(kv ...string) map[string]fileProjection {
	out := map[string]fileProjection{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = fileProjection{Data: []byte(kv[i+1]), Mode: 0o644}
	}
	return out
}

// listDir returns "name" or "name -> target" for each entry.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		s := e.Name()
		if e.Type()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(filepath.Join(dir, e.Name()))
			s += " -> " + target
		}
		if isVersionDir(e.Name()) {
			s = "..VERSION"
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func TestWriteAtomicLayout(t *testing.T) {
	dir := t.TempDir()
	if err := writeAtomic(dir, files("a", "1", "sub/b", "2", "sub/c/d", "3"), epoch, nil); err != nil {
		t.Fatal(err)
	}
	ts, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil || !strings.HasPrefix(ts, "..2026_05_01_10_00_00.") {
		t.Fatalf("..data -> %q, %v", ts, err)
	}
	want := []string{"..VERSION", "..data -> " + ts, "a -> ..data/a", "sub -> ..data/sub"}
	if got := listDir(t, dir); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("layout = %q, want %q", got, want)
	}
	for p, content := range map[string]string{"a": "1", "sub/b": "2", "sub/c/d": "3"} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(b) != content {
			t.Fatalf("%s = %q, %v", p, b, err)
		}
	}

	// Same content: nothing is rewritten.
	if err := writeAtomic(dir, files("a", "1", "sub/b", "2", "sub/c/d", "3"), epoch.Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if ts2, _ := os.Readlink(filepath.Join(dir, dataLink)); ts2 != ts {
		t.Fatalf("unchanged payload rewrote the data directory: %s -> %s", ts, ts2)
	}

	// A key goes away and another changes: new version, old one removed,
	// the stale visible link removed.
	if err := writeAtomic(dir, files("sub/b", "two"), epoch.Add(2*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	ts3, _ := os.Readlink(filepath.Join(dir, dataLink))
	if ts3 == ts {
		t.Fatal("changed payload kept the old data directory")
	}
	want = []string{"..VERSION", "..data -> " + ts3, "sub -> ..data/sub"}
	if got := listDir(t, dir); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("layout = %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub", "c")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("sub/c should be gone: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "b")); string(b) != "two" {
		t.Fatalf("sub/b = %q", b)
	}
}

func TestWriteAtomicModesAndOwner(t *testing.T) {
	dir := t.TempDir()
	uid := int64(os.Getuid())
	p := map[string]fileProjection{
		"ro":    {Data: []byte("x"), Mode: 0o400},
		"exec":  {Data: []byte("y"), Mode: 0o755},
		"owned": {Data: []byte("z"), Mode: 0o600, FsUser: &uid},
	}
	var calledWith []string
	perms := func() error { calledWith = listDir(t, dir); return nil }
	if err := writeAtomic(dir, p, epoch, perms); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"ro": 0o400, "exec": 0o755, "owned": 0o600} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.Mode().Perm() != want {
			t.Fatalf("%s mode = %v, %v; want %v", name, info.Mode().Perm(), err, want)
		}
	}
	// setPerms runs before the new version is visible.
	if fmt.Sprint(calledWith) != "[..VERSION]" {
		t.Fatalf("setPerms saw %q, want only the new version directory", calledWith)
	}
	info, _ := os.Stat(filepath.Join(dir, dataLink))
	if info.Mode().Perm() != 0o755 {
		t.Fatalf("data directory mode = %v, want 0755", info.Mode().Perm())
	}
}

func TestWriteAtomicRemovesOrphanVersions(t *testing.T) {
	dir := t.TempDir()
	orphan := filepath.Join(dir, "..2020_01_01_00_00_00.123")
	if err := os.Mkdir(orphan, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(dir, files("a", "1"), epoch, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("orphan version left: %v", err)
	}
}

func TestValidateProjectionPath(t *testing.T) {
	for _, tc := range []struct{ path, err string }{
		{"a", ""},
		{"a/b/c", ""},
		{"..a/b", "invalid path: must not start with '..': ..a/b"},
		{"", `invalid path: must not be empty: ""`},
		{"/etc/passwd", "invalid path: must be relative path: /etc/passwd"},
		{"a/../b", "invalid path: must not contain '..': a/../b"},
		{"..", "invalid path: must not contain '..': .."},
		{strings.Repeat("x", 256), "invalid path: filenames must be less than or equal to 255 characters"},
		{strings.Repeat("x/", 2049), "invalid path: must be less than or equal to 4096 characters"},
		{strings.Repeat("x", 255), ""},
		{"a/" + strings.Repeat("x", 256), "invalid path: filenames must be less than or equal to 255 characters"},
		{"..data", "invalid path: must not start with '..': ..data"},
		{"a/..b", ""},
		{"...", "invalid path: must not start with '..': ..."},
		{"./a", ""},
		{"..a/../b", "invalid path: must not contain '..': ..a/../b"},
		{"a/" + strings.Repeat("x", 256) + "/..", "invalid path: filenames must be less than or equal to 255 characters"},
		{"/" + strings.Repeat("x", 4096), "invalid path: must be relative path: /" + strings.Repeat("x", 4096)},
	} {
		err := validateProjectionPath(tc.path)
		if got := fmt.Sprint(err); (tc.err == "" && err != nil) || (tc.err != "" && got != tc.err) {
			t.Errorf("validateProjectionPath(%.20q) = %v, want %q", tc.path, err, tc.err)
		}
	}
	if err := writeAtomic(t.TempDir(), files("../escape", "x"), epoch, nil); err == nil {
		t.Fatal("writeAtomic accepted ../escape")
	}
}

// TestWriteAtomicReadersSeeWholeVersions writes many versions while a reader
// resolves ..data once per read and reads every file through it: each read
// set must come from one version, complete, and the user-visible paths must
// always resolve.
func TestWriteAtomicReadersSeeWholeVersions(t *testing.T) {
	dir := t.TempDir()
	keys := []string{"a", "b", "nested/c", "nested/d"}
	payload := func(v int) map[string]fileProjection {
		p := map[string]fileProjection{}
		for _, k := range keys {
			p[k] = fileProjection{Data: bytes.Repeat([]byte(fmt.Sprintf("v%04d;", v)), 2048), Mode: 0o644}
		}
		return p
	}
	if err := writeAtomic(dir, payload(0), epoch, nil); err != nil {
		t.Fatal(err)
	}
	const versions = 100
	done := make(chan struct{})
	var wg sync.WaitGroup
	var readerErr error
	var sets, versionsSeen int
	wg.Go(func() {
		last := -1
		for {
			select {
			case <-done:
				return
			default:
			}
			// Every user-visible file resolves. A path walk is not atomic:
			// one that resolved ..data just before a swap may find the old
			// version removed, so a failed lookup is retried (and must then
			// succeed, the new version being in place), as upstream.
			for _, k := range keys {
				var err error
				for range 10 {
					if _, err = os.Stat(filepath.Join(dir, k)); err == nil {
						break
					}
				}
				if err != nil {
					readerErr = fmt.Errorf("visible path %s missing during updates: %w", k, err)
					return
				}
			}
			ts, err := os.Readlink(filepath.Join(dir, dataLink))
			if err != nil {
				readerErr = err
				return
			}
			version := ""
			complete := true
			for _, k := range keys {
				b, err := os.ReadFile(filepath.Join(dir, ts, k))
				if errors.Is(err, fs.ErrNotExist) {
					complete = false // that version was replaced and removed: read again
					break
				}
				if err != nil {
					readerErr = err
					return
				}
				if len(b) != 6*2048 || !bytes.Equal(b, bytes.Repeat(b[:6], 2048)) {
					readerErr = fmt.Errorf("file %s of %s is partial or mixed", k, ts)
					return
				}
				if version == "" {
					version = string(b[:6])
				} else if string(b[:6]) != version {
					readerErr = fmt.Errorf("read set of %s mixes %s and %s", ts, version, b[:6])
					return
				}
			}
			if complete {
				sets++
				var v int
				if _, err := fmt.Sscanf(version, "v%04d;", &v); err != nil {
					readerErr = fmt.Errorf("version %q: %w", version, err)
					return
				}
				if v < last {
					readerErr = fmt.Errorf("version went back from %d to %d", last, v)
					return
				}
				if v != last {
					versionsSeen++
				}
				last = v
			}
		}
	})
	for v := 1; v <= versions; v++ {
		if err := writeAtomic(dir, payload(v), epoch.Add(time.Duration(v)*time.Second), nil); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if readerErr != nil {
		t.Fatal(readerErr)
	}
	if sets == 0 {
		t.Fatal("the reader never read a complete set")
	}
	t.Logf("reader read %d complete sets covering %d versions", sets, versionsSeen)
	if got := listDir(t, dir); len(got) != 5 { // version dir, ..data, a, b, nested
		t.Fatalf("leftovers after %d writes: %q", versions, got)
	}
}
