package criruntime

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

// holdingRuntime is the fake CRI runtime whose RunPodSandbox says which
// pod called (on entered) and then waits for release or the call's end.
type holdingRuntime struct {
	*critest.FakeRuntimeService
	entered chan string
	release chan struct{}
}

func (r *holdingRuntime) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	r.entered <- cfg.GetMetadata().GetName()
	select {
	case <-r.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return r.FakeRuntimeService.RunPodSandbox(ctx, cfg, handler)
}

// gatedRuntime is a Runtime over a holdingRuntime with at most max sandbox
// creations at once, on a fake clock.
func gatedRuntime(t *testing.T, max int) (*Runtime, *holdingRuntime, *clocktesting.FakeClock) {
	t.Helper()
	rs := &holdingRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(), entered: make(chan string), release: make(chan struct{})}
	clk := clocktesting.NewFakeClock(time.Now())
	r, err := NewFromServices(t.Context(), rs, critest.NewFakeImageService(), Config{
		Endpoint: "fake", PodLogsDir: t.TempDir(), RootDir: t.TempDir(), Clock: clk, MaxParallelSandboxCreations: max,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r, rs, clk
}

// startPods runs a SyncPod creating the sandbox of each named pod, each in
// its goroutine; wait returns their errors by pod.
func startPods(ctx context.Context, r *Runtime, names ...string) (wait func() map[string]error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]error{}
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}}
			res := r.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true}})
			mu.Lock()
			errs[name] = res.Err()
			mu.Unlock()
		}()
	}
	return func() map[string]error {
		wg.Wait()
		return errs
	}
}

// enteredNow returns the pod that entered RunPodSandbox within d, or "".
func enteredNow(rs *holdingRuntime, d time.Duration) string {
	select {
	case name := <-rs.entered:
		return name
	case <-time.After(d):
		return ""
	}
}

func TestSandboxCreationsWaitForATurn(t *testing.T) {
	r, rs, clk := gatedRuntime(t, 2)
	wait := startPods(t.Context(), r, "a", "b", "c")
	for range 2 {
		if enteredNow(rs, 10*time.Second) == "" {
			t.Fatal("two sandbox creations did not start")
		}
	}
	if name := enteredNow(rs, 200*time.Millisecond); name != "" {
		t.Fatalf("pod %s created its sandbox while two others were in progress; the bound is 2", name)
	}
	rs.release <- struct{}{} // one of the two finishes: the third gets its turn
	if enteredNow(rs, 10*time.Second) == "" {
		t.Fatal("the third sandbox creation did not start when one of two finished")
	}

	// Two are in progress and hold their turns: a fourth waits until
	// they have held them for sandboxTurnHold.
	waitD := startPods(t.Context(), r, "d")
	if name := enteredNow(rs, 200*time.Millisecond); name != "" {
		t.Fatalf("pod %s created its sandbox while two others held their turns", name)
	}
	clk.Step(sandboxTurnHold - time.Millisecond)
	if name := enteredNow(rs, 200*time.Millisecond); name != "" {
		t.Fatalf("pod %s created its sandbox before the others' turns ran out", name)
	}
	clk.Step(time.Millisecond)
	if enteredNow(rs, 10*time.Second) != "d" {
		t.Fatal("pod d did not get a turn when the creations in progress had held theirs for sandboxTurnHold")
	}
	close(rs.release)
	for name, err := range wait() {
		if err != nil {
			t.Errorf("pod %s: %v", name, err)
		}
	}
	if err := waitD()["d"]; err != nil {
		t.Errorf("pod d: %v", err)
	}
}

func TestSandboxTurnWaitEndsWithTheSync(t *testing.T) {
	r, rs, _ := gatedRuntime(t, 1)
	waitA := startPods(t.Context(), r, "a")
	if enteredNow(rs, 10*time.Second) != "a" {
		t.Fatal("pod a's sandbox creation did not start")
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	waitB := startPods(ctx, r, "b")
	if name := enteredNow(rs, 200*time.Millisecond); name != "" {
		t.Fatalf("pod %s created its sandbox while a held the only turn", name)
	}
	cancel(errors.New("pod b was deleted"))
	err := waitB()["b"]
	if !errors.Is(err, nodekit.ErrCreatePodSandbox) || !strings.Contains(err.Error(), "waiting for a turn to create the sandbox: pod b was deleted") {
		t.Fatalf("pod b's sync = %v; want CreatePodSandboxError naming the wait and its cause", err)
	}
	rs.release <- struct{}{}
	if err := waitA()["a"]; err != nil {
		t.Fatalf("pod a: %v", err)
	}
	// b's wait left no turn taken: c gets the only one.
	waitC := startPods(t.Context(), r, "c")
	if enteredNow(rs, 10*time.Second) != "c" {
		t.Fatal("pod c did not get the turn a gave back")
	}
	rs.release <- struct{}{}
	if err := waitC()["c"]; err != nil {
		t.Fatalf("pod c: %v", err)
	}
}

func TestNegativeMaxParallelSandboxCreationsIsRefused(t *testing.T) {
	for _, build := range []func(Config) error{
		func(c Config) error { _, err := New(t.Context(), c); return err },
		func(c Config) error {
			_, err := NewFromServices(t.Context(), critest.NewFakeRuntimeService(), critest.NewFakeImageService(), c)
			return err
		},
	} {
		err := build(Config{Endpoint: "unix:///nonexistent.sock", RootDir: t.TempDir(), MaxParallelSandboxCreations: -1})
		if err == nil || !strings.Contains(err.Error(), "MaxParallelSandboxCreations is -1") {
			t.Errorf("MaxParallelSandboxCreations -1: err = %v; want one naming the field", err)
		}
	}
}
