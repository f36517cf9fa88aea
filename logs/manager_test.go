package logs

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

// fakeRuntime serves log paths and, like a real runtime, creates the log
// file again when asked to reopen it.
type fakeRuntime struct {
	mu        sync.Mutex
	paths     map[string]string
	listErr   error
	reopenErr error
	reopened  []string
}

func (f *fakeRuntime) RunningContainerLogs(context.Context) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paths, f.listErr
}

func (f *fakeRuntime) ReopenContainerLog(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reopened = append(f.reopened, id)
	if f.reopenErr != nil {
		return f.reopenErr
	}
	fh, err := os.OpenFile(f.paths[id], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	return fh.Close()
}

var _ Runtime = (*fakeRuntime)(nil)

func appendLog(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// dirFiles lists the names in dir.
func dirFiles(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, CompressSuffix) {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b)
}

func newTestManager(t *testing.T, cfg Config) (*Manager, *fakeRuntime, string, *testclock.FakeClock) {
	t.Helper()
	dir := t.TempDir()
	rt := &fakeRuntime{paths: map[string]string{"c1": filepath.Join(dir, "0.log")}}
	clk := testclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local))
	cfg.Clock = clk
	m, err := New(cfg, rt)
	if err != nil {
		t.Fatal(err)
	}
	return m, rt, dir, clk
}

func TestStepRotatesCompressesAndRemoves(t *testing.T) {
	m, _, dir, clk := newTestManager(t, Config{MaxSize: 10, MaxFiles: 3})
	log := filepath.Join(dir, "0.log")

	appendLog(t, log, "small\n")
	if err := m.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := dirFiles(t, dir); !slices.Equal(got, []string{"0.log"}) {
		t.Fatalf("a log below MaxSize was rotated: %v", got)
	}

	appendLog(t, log, "first batch\n")
	if err := m.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := dirFiles(t, dir); !slices.Equal(got, []string{"0.log", "0.log.20260301-120000"}) {
		t.Fatalf("after the first rotation: %v", got)
	}
	if got := readFile(t, log+".20260301-120000"); got != "small\nfirst batch\n" {
		t.Fatalf("rotated file holds %q", got)
	}
	if got := readFile(t, log); got != "" {
		t.Fatalf("the reopened log holds %q", got)
	}

	clk.Step(time.Minute)
	appendLog(t, log, "second batch\n")
	if err := m.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := []string{"0.log", "0.log.20260301-120000.gz", "0.log.20260301-120100"}
	if got := dirFiles(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after the second rotation: %v, want %v", got, want)
	}
	if got := readFile(t, log+".20260301-120000.gz"); got != "small\nfirst batch\n" {
		t.Fatalf("compressed file holds %q", got)
	}

	clk.Step(time.Minute)
	appendLog(t, log, "third batch\n")
	if err := m.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	want = []string{"0.log", "0.log.20260301-120100.gz", "0.log.20260301-120200"}
	if got := dirFiles(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after the third rotation (MaxFiles 3): %v, want %v", got, want)
	}
	if got := readFile(t, log+".20260301-120100.gz") + readFile(t, log+".20260301-120200"); got != "second batch\nthird batch\n" {
		t.Fatalf("rotated content %q", got)
	}
}

func TestReopenFailureRenamesBack(t *testing.T) {
	m, rt, dir, _ := newTestManager(t, Config{MaxSize: 10, MaxFiles: 3})
	log := filepath.Join(dir, "0.log")
	appendLog(t, log, "more than ten bytes\n")
	rt.reopenErr = errors.New("runtime says no")
	err := m.Step(t.Context())
	if err == nil || !strings.Contains(err.Error(), "runtime says no") || !strings.Contains(err.Error(), "c1") {
		t.Fatalf("Step error %v", err)
	}
	if got := dirFiles(t, dir); !slices.Equal(got, []string{"0.log"}) {
		t.Fatalf("files after a failed reopen: %v", got)
	}
	if got := readFile(t, log); got != "more than ten bytes\n" {
		t.Fatalf("log holds %q", got)
	}
	rt.reopenErr = nil
	if err := m.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := dirFiles(t, dir); len(got) != 2 {
		t.Fatalf("the next round did not rotate: %v", got)
	}
}

func TestMissingLogIsReopened(t *testing.T) {
	m, rt, dir, _ := newTestManager(t, Config{MaxSize: 10, MaxFiles: 3})
	if err := m.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rt.reopened, []string{"c1"}) || !slices.Equal(dirFiles(t, dir), []string{"0.log"}) {
		t.Fatalf("reopened %v, files %v", rt.reopened, dirFiles(t, dir))
	}
}

func TestRotate(t *testing.T) {
	m, _, dir, clk := newTestManager(t, Config{MaxFiles: 2})
	log := filepath.Join(dir, "0.log")
	// A missing log is reopened, and an empty one left alone.
	if err := m.Rotate(t.Context(), "c1"); err != nil {
		t.Fatal(err)
	}
	if got := dirFiles(t, dir); !slices.Equal(got, []string{"0.log"}) {
		t.Fatalf("an empty log was rotated: %v", got)
	}
	appendLog(t, log, "x\n") // far below the default 10Mi
	if err := m.Rotate(t.Context(), "c1"); err != nil {
		t.Fatal(err)
	}
	if got := dirFiles(t, dir); !slices.Equal(got, []string{"0.log", "0.log.20260301-120000"}) {
		t.Fatalf("after Rotate: %v", got)
	}
	appendLog(t, log, "y\n")
	if err := m.Rotate(t.Context(), "c1"); err == nil || !strings.Contains(err.Error(), "already rotated within this second") {
		t.Fatalf("second Rotate within a second: %v", err)
	}
	clk.Step(time.Second)
	if err := m.Rotate(t.Context(), "c1"); err != nil {
		t.Fatal(err)
	}
	if got := dirFiles(t, dir); !slices.Equal(got, []string{"0.log", "0.log.20260301-120001"}) {
		t.Fatalf("after Rotate with MaxFiles 2: %v", got)
	}
	if err := m.Rotate(t.Context(), "gone"); err == nil || !strings.Contains(err.Error(), "container gone is not running") {
		t.Fatalf("Rotate of an unknown container: %v", err)
	}
}

func TestStepManyContainers(t *testing.T) {
	dir := t.TempDir()
	rt := &fakeRuntime{paths: map[string]string{}}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		p := filepath.Join(dir, id, "0.log")
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		appendLog(t, p, "0123456789abcdef\n")
		rt.paths[id] = p
	}
	rt.paths["e"] = filepath.Join(dir, "nodir", "0.log") // its log cannot be reopened
	m, err := New(Config{MaxSize: 16, Workers: 3, Clock: testclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local))}, rt)
	if err != nil {
		t.Fatal(err)
	}
	err = m.Step(t.Context())
	if err == nil || !strings.Contains(err.Error(), "container e") {
		t.Fatalf("Step error %v, want one about container e", err)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if got := dirFiles(t, filepath.Join(dir, id)); len(got) != 2 {
			t.Errorf("container %s: files %v", id, got)
		}
	}
	rt.listErr = errors.New("runtime down")
	if err := m.Step(t.Context()); err == nil || !strings.Contains(err.Error(), "runtime down") {
		t.Fatalf("Step error %v", err)
	}
}

func TestRunStepsEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		log := filepath.Join(dir, "0.log")
		rt := &fakeRuntime{paths: map[string]string{"c1": log}}
		m, err := New(Config{MaxSize: 4, Interval: 10 * time.Second}, rt) // the real clock: virtual in the bubble
		if err != nil {
			t.Fatal(err)
		}
		appendLog(t, log, "12345\n")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- m.Run(ctx) }()
		synctest.Wait()
		if got := dirFiles(t, dir); len(got) != 2 {
			t.Fatalf("Run did not step at once: %v", got)
		}
		appendLog(t, log, "12345\n")
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if got := dirFiles(t, dir); len(got) != 2 {
			t.Fatalf("Run stepped before the interval: %v", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := dirFiles(t, dir); len(got) != 3 {
			t.Fatalf("Run did not step after the interval: %v", got)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	})
}

func TestNewValidates(t *testing.T) {
	rt := &fakeRuntime{}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxFiles: 1}, "Config.MaxFiles is 1"},
		{Config{Workers: -1}, "Config.Workers"},
		{Config{Interval: -time.Second}, "Config.Interval"},
	} {
		if _, err := New(tc.cfg, rt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(Config{}, nil); err == nil {
		t.Error("New with a nil Runtime succeeded")
	}
	m, err := New(Config{}, rt)
	if err != nil || m.Policy() != (Policy{MaxSize: 10 << 20, MaxFiles: 5}) {
		t.Fatalf("defaults: %+v, %v", m.Policy(), err)
	}
	m, _ = New(Config{MaxSize: -1}, rt)
	rt.listErr = errors.New("must not be called")
	if err := m.Step(t.Context()); err != nil {
		t.Fatalf("Step with rotation off: %v", err)
	}
}
