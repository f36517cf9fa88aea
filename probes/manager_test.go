package probes

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// bubble runs Run in the background of a synctest bubble and returns a
// stepper for the fake clock and a stop function that checks Run's return.
func (f *fixture) bubble(t *testing.T) (step func(time.Duration), stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- f.m.Run(ctx) }()
	synctest.Wait()
	step = func(d time.Duration) {
		f.clk.Step(d)
		synctest.Wait()
	}
	stop = func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	}
	return step, stop
}

// drainUpdates returns the UIDs waiting on Updates.
func drainUpdates(m *Manager) []types.UID {
	var uids []types.UID
	for {
		select {
		case uid := <-m.Updates():
			uids = append(uids, uid)
		default:
			return uids
		}
	}
}

// TestManagerPeriods runs real workers on the fake clock: one probe per
// period, updates on changes only, and RemovePod stops everything.
func TestManagerPeriods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		step, stop := f.bubble(t)
		defer stop()
		pod := testPod("p1", execProbe(func(p *v1.Probe) { p.PeriodSeconds = 5 }), execProbe(nil), nil)
		f.running(pod, "c1", epoch)
		f.m.AddPod(testCtx(t), pod)
		f.m.AddPod(testCtx(t), pod) // idempotent
		synctest.Wait()

		// Both workers probed at once: readiness went Failure -> Success.
		if n := f.exec.count(); n != 2 {
			t.Fatalf("%d probes at start, want 2", n)
		}
		if r, ok := f.m.Result(Readiness, cid("c1")); !ok || r != Success {
			t.Fatalf("readiness %v %v", r, ok)
		}
		got := drainUpdates(f.m)
		if len(got) == 0 {
			t.Fatal("no update")
		}
		for _, uid := range got {
			if uid != "p1" {
				t.Fatalf("updates %v, want p1 only", got)
			}
		}

		step(5 * time.Second) // liveness only
		if n := f.exec.count(); n != 3 {
			t.Fatalf("%d probes after 5s, want 3", n)
		}
		step(5 * time.Second) // both
		if n := f.exec.count(); n != 5 {
			t.Fatalf("%d probes after 10s, want 5", n)
		}
		if got := drainUpdates(f.m); len(got) != 0 {
			t.Fatalf("updates %v without a change", got)
		}

		// Readiness fails three periods in a row.
		f.exec.answer(1, "", nil)
		step(10 * time.Second)
		step(10 * time.Second)
		if r, _ := f.m.Result(Readiness, cid("c1")); r != Success {
			t.Fatalf("readiness %v after two failures", r)
		}
		step(10 * time.Second)
		// Liveness (period 5) failed three times first: Failure.
		if r, _ := f.m.Result(Liveness, cid("c1")); r != Failure {
			t.Fatalf("liveness %v", r)
		}
		if r, _ := f.m.Result(Readiness, cid("c1")); r != Failure {
			t.Fatalf("readiness %v after three failures", r)
		}
		if got := drainUpdates(f.m); len(got) == 0 {
			t.Fatal("no update for the failures")
		}

		f.m.RemovePod(pod)
		synctest.Wait()
		if _, ok := f.m.Result(Liveness, cid("c1")); ok {
			t.Error("results kept after RemovePod")
		}
		before := f.exec.count()
		step(time.Minute)
		if f.exec.count() != before {
			t.Error("probes after RemovePod")
		}
		f.m.mu.Lock()
		n := len(f.m.workers)
		f.m.mu.Unlock()
		if n != 0 {
			t.Errorf("%d workers left", n)
		}
	})
}

// TestReadyPromptlyAfterStartup: a readiness probe with a long period runs
// right after the startup probe succeeds, not a period later.
func TestReadyPromptlyAfterStartup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		step, stop := f.bubble(t)
		defer stop()
		pod := testPod("p1", nil,
			execProbe(func(p *v1.Probe) { p.PeriodSeconds = 60 }),
			execProbe(func(p *v1.Probe) { p.PeriodSeconds, p.FailureThreshold = 1, 100 }))
		f.running(pod, "c1", epoch)
		f.exec.answer(1, "", nil)
		f.m.AddPod(testCtx(t), pod)
		synctest.Wait()
		step(3 * time.Second)
		f.exec.answer(0, "", nil)
		step(time.Second)
		if r, _ := f.m.Result(Startup, cid("c1")); r != Success {
			t.Fatalf("startup %v", r)
		}
		if r, _ := f.m.Result(Readiness, cid("c1")); r != Success {
			t.Fatalf("readiness %v right after startup, want Success", r)
		}
	})
}

// TestUpdatesNeverBlock: with nobody reading, workers keep going and the
// changes of many pods wait, one UID per pod.
func TestUpdatesNeverBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		step, stop := f.bubble(t)
		defer stop()
		const pods = 3 * updatesCapacity
		for i := range pods {
			pod := testPod(string(rune('a'+i%26))+string(rune('a'+i/26)), nil, execProbe(func(p *v1.Probe) { p.FailureThreshold = 1 }), nil)
			f.running(pod, "c"+string(pod.UID), epoch)
			f.m.AddPod(testCtx(t), pod)
		}
		synctest.Wait()
		for range 3 { // flip every readiness a few times
			f.exec.answer(1, "", nil)
			step(10 * time.Second)
			f.exec.answer(0, "", nil)
			step(10 * time.Second)
		}
		if n := f.exec.count(); n != 7*pods {
			t.Fatalf("%d probes, want %d: a worker blocked", n, 7*pods)
		}
		seen := map[types.UID]int{}
		for {
			got := drainUpdates(f.m)
			if len(got) == 0 {
				break
			}
			for _, uid := range got {
				seen[uid]++
			}
			synctest.Wait()
		}
		if len(seen) != pods {
			t.Errorf("updates for %d pods, want %d", len(seen), pods)
		}
		total := 0
		for _, n := range seen {
			total += n
		}
		// What the channel holds, the one Run holds, then one per pod.
		if total > updatesCapacity+1+pods {
			t.Errorf("%d updates for %d pods: not coalesced", total, pods)
		}
	})
}

// TestStopLivenessAndStartup keeps readiness and a startup Success.
func TestStopLivenessAndStartup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		step, stop := f.bubble(t)
		defer stop()
		pod := testPod("p1", execProbe(nil), execProbe(nil), execProbe(nil))
		f.running(pod, "c1", epoch)
		f.m.AddPod(testCtx(t), pod)
		synctest.Wait()
		step(10 * time.Second)
		f.m.StopLivenessAndStartup(pod)
		synctest.Wait()
		if _, ok := f.m.Result(Liveness, cid("c1")); ok {
			t.Error("liveness result kept")
		}
		if r, _ := f.m.Result(Startup, cid("c1")); r != Success {
			t.Errorf("startup %v, want the Success kept", r)
		}
		before := f.exec.count()
		step(10 * time.Second)
		if n := f.exec.count() - before; n != 1 {
			t.Errorf("%d probes in a period, want readiness only", n)
		}
		f.m.CleanupPods(map[types.UID]bool{"other": true})
		synctest.Wait()
		if _, ok := f.m.Result(Startup, cid("c1")); ok {
			t.Error("startup result kept after CleanupPods")
		}
		if _, ok := f.m.Result(Readiness, cid("c1")); ok {
			t.Error("readiness result kept after CleanupPods")
		}
	})
}

// TestSidecarsOnly: regular and restartable init containers get workers;
// plain init containers do not.
func TestSidecarsOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		_, stop := f.bubble(t)
		pod := testPod("p1", nil, execProbe(nil), nil)
		pod.Spec.InitContainers = []v1.Container{
			{Name: "init", ReadinessProbe: execProbe(nil)},
			{Name: "sidecar", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways), StartupProbe: execProbe(nil), LivenessProbe: execProbe(nil)},
		}
		f.m.AddPod(testCtx(t), pod)
		f.m.mu.Lock()
		var keys []workerKey
		for k := range f.m.workers {
			keys = append(keys, k)
		}
		f.m.mu.Unlock()
		if len(keys) != 3 {
			t.Errorf("workers %v, want app/readiness and sidecar/startup+liveness", keys)
		}
		stop()
		f.m.mu.Lock()
		n := len(f.m.workers)
		f.m.mu.Unlock()
		if n != 0 {
			t.Errorf("%d workers after Run returned", n)
		}
		f.m.AddPod(testCtx(t), pod)
		synctest.Wait()
		if f.exec.count() != 0 {
			t.Error("AddPod after Run returned started workers")
		}
	})
}

// TestJitter: a new worker of a young manager waits the jittered part of
// its period before the first probe.
func TestJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.m.jitter = func() float64 { return 0.5 }
		step, stop := f.bubble(t)
		defer stop()
		pod := testPod("p1", execProbe(nil), nil, nil)
		f.running(pod, "c1", epoch)
		f.m.AddPod(testCtx(t), pod)
		synctest.Wait()
		step(4 * time.Second)
		if f.exec.count() != 0 {
			t.Fatal("probed before the jitter")
		}
		step(time.Second)
		if f.exec.count() != 1 {
			t.Fatal("no probe after the jitter")
		}
	})
}

func TestNewManagerNeedsStatus(t *testing.T) {
	if _, err := NewManager(Config{}); err == nil {
		t.Error("no error without Status")
	}
}
