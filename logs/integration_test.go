package logs_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/logs"
)

var _ logs.Runtime = (*criruntime.Runtime)(nil)

// TestContainerdIntegration rotates the log of a chatty busybox container
// on a private, real containerd.
func TestContainerdIntegration(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	ctx := t.Context()
	podLogs := t.TempDir()
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: podLogs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })

	// About 100 numbered lines of 120 bytes every 50ms: some 250KB/s.
	script := `i=0; while true; do j=0; while [ $j -lt 100 ]; do echo "line-$i-` + strings.Repeat("0", 100) +
		`"; i=$((i+1)); j=$((j+1)); done; sleep 0.05; done`
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "chatty", Namespace: "default", UID: "uid-chatty"},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "app", Image: agenttest.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sh", "-c", script},
		}}},
	}
	if err := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	var id, log string
	running, err := rt.RunningContainerLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for cid, p := range running {
		if strings.HasPrefix(p, podLogs) {
			id, log = cid, p
		}
	}
	if id == "" {
		t.Fatalf("the chatty container is not among the running ones: %v", running)
	}

	const maxFiles = 3
	m, err := logs.New(logs.Config{MaxSize: 64 << 10, MaxFiles: maxFiles}, rt)
	if err != nil {
		t.Fatal(err)
	}

	// The first rotation on demand, then Step until the log has been
	// rotated five times (the timestamps name at most one per second).
	waitFor(t, "the log to have content", func() bool { fi, err := os.Stat(log); return err == nil && fi.Size() > 0 })
	if err := m.Rotate(ctx, id); err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d rotations within 60s: %v", len(seen), seen)
		}
		if err := m.Step(ctx); err != nil {
			t.Fatalf("Step: %v", err)
		}
		files := logFiles(t, log)
		if len(files) > maxFiles {
			t.Fatalf("%d log files, more than MaxFiles %d: %v", len(files), maxFiles, files)
		}
		for _, f := range files[:len(files)-1] {
			seen[strings.TrimSuffix(f, ".gz")] = true
		}
		time.Sleep(300 * time.Millisecond)
	}

	files := logFiles(t, log)
	t.Logf("after %d rotations: %v", len(seen), files)
	if len(files) != maxFiles {
		t.Fatalf("files %v, want %d", files, maxFiles)
	}
	rotated := files[:len(files)-1]
	for i, f := range rotated {
		if gz := strings.HasSuffix(f, ".gz"); gz != (i < len(rotated)-1) {
			t.Errorf("%s: compressed = %v; every rotated file but the newest must be", f, gz)
		}
	}
	// Nothing lost or duplicated: the files, oldest first, hold a run of
	// consecutive line numbers, and the current file keeps growing after
	// the last reopen.
	var nums []int
	for _, f := range rotated {
		nums = append(nums, lineNumbers(t, f)...)
	}
	newestRotated := nums[len(nums)-1]
	waitFor(t, "lines after the newest rotated one in the current log", func() bool {
		cur := lineNumbers(t, log)
		return len(cur) > 0 && cur[len(cur)-1] > newestRotated
	})
	nums = append(nums, lineNumbers(t, log)...)
	for i := 1; i < len(nums); i++ {
		if nums[i] != nums[i-1]+1 {
			t.Fatalf("line %d follows line %d across the rotated files", nums[i], nums[i-1])
		}
	}
	t.Logf("lines %d..%d across %d files; the newest rotated file ends at %d", nums[0], nums[len(nums)-1], len(files), newestRotated)

	// A container that is not running cannot be rotated.
	if err := m.Rotate(ctx, "no-such-container"); err == nil {
		t.Fatal("Rotate of an unknown container succeeded")
	}
}

// logFiles lists log's rotated files, oldest first, and log itself last.
func logFiles(t *testing.T, log string) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Dir(log))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), filepath.Base(log)+".") {
			out = append(out, filepath.Join(filepath.Dir(log), e.Name()))
		}
	}
	slices.Sort(out)
	return append(out, log)
}

var lineRE = regexp.MustCompile(` stdout F line-(\d+)-0+$`)

// lineNumbers returns the numbers of the complete lines of a CRI log file,
// gzip-compressed or not.
func lineNumbers(t *testing.T, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		r = zr
	}
	var out []int
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue // the last line, still being written
		}
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}

// waitFor polls cond (a real runtime: there is no clock to fake) for up to
// 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
