package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/statusmgr"
)

// syncBuffer is a bytes.Buffer safe for the sink's writes and the test's
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines decodes every line written so far.
func (s *syncBuffer) lines(t *testing.T) []line {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []line
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// summary is "phase" for a status line, "deleted" for a deletion.
func summary(l line) string {
	if l.Deleted {
		return "deleted"
	}
	return string(l.Status.Phase)
}

// The status manager publishes through the sink: one line per new status,
// nothing for a resync of the same status, a last line for the deletion.
func TestSinkUnderStatusManager(t *testing.T) {
	ctx := context.Background()
	out := &syncBuffer{}
	m, err := statusmgr.NewManager(statusmgr.Config{Sink: newJSONSink(out)})
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{Name: "app"}}},
	}
	id := nodekit.ContainerID{Type: "containerd", ID: "abc"}
	running := v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "app", ContainerID: id.String(),
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}
	if err := m.SetPodStatus(pod, running); err != nil {
		t.Fatal(err)
	}
	_ = m.SyncOnce(ctx)
	_ = m.Resync(ctx) // republishes (the manager has no API view): the sink skips it
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	_ = m.TerminatePod(deleting)
	_ = m.PodResourcesReclaimed(pod.UID)
	_ = m.SyncOnce(ctx)

	lines := out.lines(t)
	var got []string
	for _, l := range lines {
		got = append(got, summary(l))
	}
	if want := "Running Failed deleted"; strings.Join(got, " ") != want {
		t.Fatalf("lines %q, want %q", got, want)
	}
	if l := lines[0]; l.Namespace != "default" || l.Name != "web" || l.UID != "uid-web" || l.Status.ContainerStatuses[0].ContainerID != id.String() {
		t.Fatalf("first line: %+v", l)
	}
}

// failingWriter fails its first write, as a broken connection would.
type failingWriter struct {
	syncBuffer
	failed bool
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if !f.failed {
		f.failed = true
		return 0, errors.New("broker unreachable")
	}
	return f.syncBuffer.Write(p)
}

// A failed write is an error to the status manager, which sends the status
// again on its next sync.
func TestSinkWriteFailureIsRetried(t *testing.T) {
	ctx := context.Background()
	out := &failingWriter{}
	m, _ := statusmgr.NewManager(statusmgr.Config{Sink: newJSONSink(out)})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"}}
	_ = m.SetPodStatus(pod, v1.PodStatus{Phase: v1.PodPending})
	if err := m.SyncOnce(ctx); err == nil || !strings.Contains(err.Error(), "broker unreachable") {
		t.Fatalf("SyncOnce = %v, want the write error", err)
	}
	if err := m.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if lines := out.lines(t); len(lines) != 1 || lines[0].Status.Phase != v1.PodPending {
		t.Fatalf("lines after retry: %+v", lines)
	}
}

// Under the real sync loop (agenttest's simulated node), a pod that runs
// and fails shows up as lines that never go backwards.
func TestSinkOnSimulatedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &syncBuffer{}
		n := agenttest.StartSimNode(t, agenttest.SimOptions{Sink: newJSONSink(out)})
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "default", UID: "uid-job", CreationTimestamp: metav1.Now()},
			Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
		}
		n.AddPod(pod)
		n.Settle(2 * time.Second)
		if err := n.Runtime().ExitContainer(pod.UID, "app", 3); err != nil {
			t.Fatal(err)
		}
		n.Settle(2 * time.Second)
		n.DeletePod(pod)
		n.Settle(5 * time.Second)

		var phases []string
		for _, l := range out.lines(t) {
			if s := summary(l); len(phases) == 0 || phases[len(phases)-1] != s {
				phases = append(phases, s)
			}
		}
		if got, want := strings.Join(phases, " "), "Pending Running Failed deleted"; got != want {
			t.Fatalf("phases %q, want %q", got, want)
		}
	})
}

// The agent itself, on a private containerd: a static pod's statuses come
// out as JSON lines.
func TestAgentOnContainerd(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	pod := fmt.Sprintf(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello"},
  "spec": {"containers": [{"name": "app", "image": %q, "imagePullPolicy": "Never",
    "command": ["sh", "-c", "echo hello; sleep 3600"]}]}}`, agenttest.BusyboxImage)
	if err := os.WriteFile(filepath.Join(manifests, "hello.json"), []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))))
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, config{endpoint: cri.Endpoint, manifests: manifests, rootDir: filepath.Join(dir, "root"),
			podLogsDir: filepath.Join(dir, "logs"), nodeName: "edge-1", out: out})
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v", err)
		}
	}()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range out.lines(t) {
			if l.Name == "hello-edge-1" && l.Status != nil && l.Status.Phase == v1.PodRunning &&
				len(l.Status.ContainerStatuses) == 1 && l.Status.ContainerStatuses[0].State.Running != nil {
				t.Logf("running: pod IP %s, container %s", l.Status.PodIP, l.Status.ContainerStatuses[0].ContainerID)
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no Running line within 90s; lines: %+v", out.lines(t))
}
