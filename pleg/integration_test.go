package pleg_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/pleg"
)

// relistCounter counts the relists (ListPods calls) of a real runtime.
type relistCounter struct {
	*criruntime.Runtime
	lists atomic.Int64
}

func (r *relistCounter) ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error) {
	r.lists.Add(1)
	return r.Runtime.ListPods(ctx, all)
}

// TestEventedOnContainerd runs the evented PLEG as fullagent composes it
// (a Generic over criruntime, events from criruntime's CRI
// GetContainerEvents) against the containerd $NODEKIT_CONTAINERD picks, and
// kills a container's process. On containerd 2 the relist period is made an
// hour, so the death can only arrive through the event stream: as a
// ContainerDied event, with no relist in between, the cache refreshed, and
// the stream never broken or given up. On 1.6, which lacks
// GetContainerEvents, the PLEG must fall back to relisting (every second)
// and the death arrive through a relist.
func TestEventedOnContainerd(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.WithoutCancel(ctx)) })

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "evented", Namespace: "default", UID: "uid-evented"},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "app", Image: agenttest.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sleep", "3600"},
		}}},
	}
	if err := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}

	evented := cri.Version == agenttest.ContainerdVersion2
	var opts pleg.Options
	if evented {
		opts.RelistPeriod = time.Hour // only the first relist, at start
	}
	counted := &relistCounter{Runtime: rt}
	cache := pleg.NewCache()
	g := pleg.NewGeneric(counted, cache, opts)
	e := pleg.NewEvented(g, rt)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	t.Cleanup(func() { cancel(); _ = <-done })

	st, err := rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	app := st.FindContainer("app")
	if app == nil || app.State != nodekit.StateRunning {
		t.Fatalf("container app: %+v, want running", app)
	}
	id := app.ID
	// The first relist reports the running container (and the sandbox).
	waitEvent(t, e, id, pleg.ContainerStarted, 30*time.Second)
	if !evented {
		// containerd 1.6: MaxStreamFailures broken streams, then relists.
		waitFor(t, 30*time.Second, "the PLEG to fall back to relisting", e.FellBack)
	}

	pid, err := containerPID(id.ID)
	if err != nil {
		t.Fatal(err)
	}
	before := counted.lists.Load()
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill container %s (pid %d): %v", id, pid, err)
	}
	ev := waitEvent(t, e, id, pleg.ContainerDied, 30*time.Second)
	latency := time.Since(killed)
	relists := counted.lists.Load() - before
	t.Logf("containerd %s (%s): ContainerDied %v after the kill, %d relists in between", cri.Version, cri.RuntimeVersion, latency, relists)
	if ev.PodID != pod.UID {
		t.Errorf("ContainerDied for pod %q, want %q", ev.PodID, pod.UID)
	}
	st, err = cache.Get(pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.FindContainer("app"); c == nil || c.State != nodekit.StateExited || c.ExitCode != 137 {
		t.Errorf("cached status after the event: %+v, want exited with 137", c)
	}

	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if evented {
		// The next relist is an hour away: with no relist in between, the
		// event stream carried the death.
		if relists != 0 {
			t.Errorf("%d relists between the kill and the event: the event stream did not carry it", relists)
		}
		if e.FellBack() {
			t.Error("the evented PLEG fell back to relisting on containerd 2")
		}
		for _, bad := range []string{"falling back to relisting", "event stream broke"} {
			if strings.Contains(logs, bad) {
				t.Errorf("log says %q on containerd 2:\n%s", bad, logs)
			}
		}
		return
	}
	if relists == 0 {
		t.Error("containerd 1.6: the death arrived without a relist")
	}
	if !strings.Contains(logs, "falling back to relisting") {
		t.Errorf("containerd 1.6: the log does not say the PLEG fell back:\n%s", logs)
	}
}

// waitEvent returns the first event of type typ for container id,
// skipping others.
func waitEvent(t *testing.T, e *pleg.Evented, id nodekit.ContainerID, typ pleg.EventType, timeout time.Duration) *pleg.Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-e.Events():
			if ev.Container == id && ev.Type == typ {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event for container %s within %v", typ, id, timeout)
		}
	}
}

// waitFor polls cond (a real runtime: there is no clock to fake).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// containerPID finds the process of a container: the one process whose
// cgroup is named after the container ID.
func containerPID(id string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if i := strings.LastIndexByte(line, ':'); i >= 0 && filepath.Base(line[i+1:]) == id {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process in the cgroup of container %s", id)
}
