package probes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// testCtx carries a logger writing to t, quiet below V(1).
func testCtx(t *testing.T) context.Context {
	return klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0))))
}

// TestThresholds follows a readiness probe with successThreshold 2 and
// failureThreshold 3: the reported result changes only after that many
// equal results in a row, and a differing result restarts the count.
func TestThresholds(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", nil, execProbe(func(p *v1.Probe) { p.SuccessThreshold, p.FailureThreshold = 2, 3 }), nil)
	w := f.worker(pod, Readiness)
	f.running(pod, "c1", epoch)

	steps := []struct {
		code int
		want Result
	}{
		{0, Failure}, // one success is not enough
		{0, Success}, // two are
		{1, Success}, // failures 1, 2: still ready
		{1, Success},
		{0, Success}, // a success resets the failure count
		{1, Success},
		{1, Success},
		{1, Failure}, // the third failure in a row
		{0, Failure},
		{0, Success},
	}
	if r, ok := f.result(Readiness, "c1"); ok {
		t.Fatalf("result %v before the first step", r)
	}
	for i, s := range steps {
		f.exec.answer(s.code, "", nil)
		if !w.step(ctx) {
			t.Fatalf("step %d: worker stopped", i)
		}
		if got, _ := f.result(Readiness, "c1"); got != s.want {
			t.Fatalf("step %d (exit %d): result %v, want %v", i, s.code, got, s.want)
		}
	}
	if n := f.exec.count(); n != len(steps) {
		t.Errorf("%d probes, want %d", n, len(steps))
	}
}

// TestInitialResults: before any probe ran, readiness is Failure, liveness
// Success, startup Unknown; a container without the probe has no result.
func TestInitialResults(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	delay := func(p *v1.Probe) { p.InitialDelaySeconds = 60 }
	pod := testPod("p1", execProbe(delay), execProbe(delay), execProbe(delay))
	for _, k := range []Kind{Liveness, Readiness, Startup} {
		w := f.worker(pod, k)
		f.running(pod, "c1", epoch)
		w.step(ctx)
	}
	for k, want := range map[Kind]Result{Liveness: Success, Readiness: Failure, Startup: Unknown} {
		if got, ok := f.m.Result(k, cid("c1")); !ok || got != want {
			t.Errorf("%s = %v, %v; want %v", k, got, ok, want)
		}
	}
	if _, ok := f.m.Result(Liveness, cid("other")); ok {
		t.Error("a result for an unknown container")
	}
	if f.exec.count() != 0 {
		t.Error("probed during the initial delay")
	}
}

// TestInitialDelay counts the delay from the container's start, not from
// the worker's.
func TestInitialDelay(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", execProbe(func(p *v1.Probe) { p.InitialDelaySeconds = 5 }), nil, nil)
	w := f.worker(pod, Liveness)
	f.clk.Step(2 * time.Second)
	f.running(pod, "c1", f.clk.Now().Add(-time.Second)) // started 1s ago

	for range 4 { // 1s, 2s, 3s, 4s after the start
		w.step(ctx)
		if f.exec.count() != 0 {
			t.Fatalf("probed %v after the start, before the 5s initial delay", f.clk.Since(epoch.Add(time.Second)))
		}
		f.clk.Step(time.Second)
	}
	w.step(ctx) // 5s
	if f.exec.count() != 1 {
		t.Fatalf("%d probes at the end of the initial delay, want 1", f.exec.count())
	}
}

// TestLivenessFailureHoldsUntilRestart: once liveness reports Failure the
// worker stops probing that container; a new container (new ID) starts from
// Success with its own initial delay, and the old result is gone.
func TestLivenessFailureHoldsUntilRestart(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", execProbe(func(p *v1.Probe) { p.InitialDelaySeconds, p.FailureThreshold = 3, 2 }), nil, nil)
	w := f.worker(pod, Liveness)
	f.running(pod, "c1", epoch)
	f.clk.Step(3 * time.Second)
	f.exec.answer(1, "boom", nil)

	w.step(ctx)
	if r, _ := f.result(Liveness, "c1"); r != Success {
		t.Fatalf("after one failure: %v, want Success (threshold 2)", r)
	}
	w.step(ctx)
	if r, _ := f.result(Liveness, "c1"); r != Failure {
		t.Fatalf("after two failures: %v, want Failure", r)
	}
	for range 3 {
		w.step(ctx)
	}
	if n := f.exec.count(); n != 2 {
		t.Fatalf("%d probes, want none after the Failure", n)
	}

	// The loop restarted it.
	f.running(pod, "c2", f.clk.Now())
	f.exec.answer(1, "still bad", nil)
	w.step(ctx)
	if _, ok := f.result(Liveness, "c1"); ok {
		t.Error("the old container's result is still there")
	}
	if r, _ := f.result(Liveness, "c2"); r != Success {
		t.Errorf("new container: %v, want Success", r)
	}
	if n := f.exec.count(); n != 2 {
		t.Fatalf("probed the new container within its initial delay")
	}
	f.clk.Step(3 * time.Second)
	w.step(ctx)
	if r, _ := f.result(Liveness, "c2"); r != Success {
		t.Errorf("after one failure of the new container: %v, want Success: the count started over", r)
	}
	w.step(ctx)
	if r, _ := f.result(Liveness, "c2"); r != Failure {
		t.Errorf("after two failures of the new container: %v, want Failure", r)
	}
	want := []string{
		"Warning Unhealthy Liveness probe failed: boom",
		"Warning Unhealthy Liveness probe failed: boom",
		"Warning Unhealthy Liveness probe failed: still bad",
		"Warning Unhealthy Liveness probe failed: still bad",
	}
	if got := f.events.list(); !slices.Equal(got, want) {
		t.Errorf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestReadinessRestartResets: a ready container that restarts is not ready
// again until the new one passes.
func TestReadinessRestartResets(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", nil, execProbe(nil), nil)
	w := f.worker(pod, Readiness)
	f.running(pod, "c1", epoch)
	w.step(ctx)
	if r, _ := f.result(Readiness, "c1"); r != Success {
		t.Fatalf("%v, want Success", r)
	}
	f.running(pod, "c2", epoch)
	f.exec.answer(1, "", nil)
	w.step(ctx)
	if r, ok := f.result(Readiness, "c2"); !ok || r != Failure {
		t.Fatalf("new container: %v, %v; want Failure", r, ok)
	}
}

// TestStartupGates: liveness and readiness do not run until the startup
// probe succeeded; the startup probe stops once it has; and a startup
// Success nudges the readiness worker.
func TestStartupGates(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", execProbe(nil), execProbe(nil), execProbe(func(p *v1.Probe) { p.FailureThreshold = 10 }))
	live, ready, startup := f.worker(pod, Liveness), f.worker(pod, Readiness), f.worker(pod, Startup)
	f.running(pod, "c1", epoch)

	f.exec.answer(1, "not yet", nil)
	for range 3 {
		live.step(ctx)
		ready.step(ctx)
		startup.step(ctx)
	}
	if n := f.exec.count(); n != 3 {
		t.Fatalf("%d probes, want 3 (startup only)", n)
	}
	if r, _ := f.result(Startup, "c1"); r != Unknown {
		t.Fatalf("startup %v, want Unknown below the threshold", r)
	}
	f.exec.answer(0, "", nil)
	startup.step(ctx)
	if r, _ := f.result(Startup, "c1"); r != Success {
		t.Fatalf("startup %v, want Success", r)
	}
	if len(ready.pokeCh) != 1 {
		t.Error("startup success did not nudge the readiness worker")
	}
	startup.step(ctx)
	if n := f.exec.count(); n != 4 {
		t.Fatalf("the startup probe ran again after succeeding")
	}
	// The status does not say Started yet; the workers know anyway.
	ready.step(ctx)
	live.step(ctx)
	if n := f.exec.count(); n != 6 {
		t.Fatalf("%d probes, want liveness and readiness to run after startup", n)
	}
	if r, _ := f.result(Readiness, "c1"); r != Success {
		t.Errorf("readiness %v, want Success", r)
	}
}

// TestStartupFailure reports Failure after failureThreshold and then waits
// for a new container.
func TestStartupFailure(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", nil, nil, execProbe(func(p *v1.Probe) { p.FailureThreshold = 2 }))
	w := f.worker(pod, Startup)
	f.running(pod, "c1", epoch)
	f.exec.answer(1, "", nil)
	w.step(ctx)
	w.step(ctx)
	w.step(ctx)
	if r, _ := f.result(Startup, "c1"); r != Failure {
		t.Fatalf("startup %v, want Failure", r)
	}
	if n := f.exec.count(); n != 2 {
		t.Fatalf("%d probes, want 2", n)
	}
}

// TestExecTimeoutAndErrors: a timeout is a failure; an error of the runtime
// is retried, recorded and counts for nothing.
func TestExecTimeoutAndErrors(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", execProbe(func(p *v1.Probe) {
		p.FailureThreshold = 1
		p.Exec.Command = []string{"sh", "-c", "sleep $(SECS)"}
	}), nil, nil)
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "SECS", Value: "9"}}
	w := f.worker(pod, Liveness)
	f.running(pod, "c1", epoch)

	f.exec.answer(-1, "", errors.New("container not found"))
	w.step(ctx)
	if n := f.exec.count(); n != 3 {
		t.Errorf("%d exec attempts on a runtime error, want 3", n)
	}
	if r, _ := f.result(Liveness, "c1"); r != Success {
		t.Errorf("after a runtime error: %v, want Success (no result)", r)
	}
	f.exec.answer(-1, "", context.DeadlineExceeded)
	w.step(ctx)
	if r, _ := f.result(Liveness, "c1"); r != Failure {
		t.Errorf("after a timeout: %v, want Failure", r)
	}
	want := []string{
		"Warning Unhealthy Liveness probe errored and resulted in unknown state: container not found",
		`Warning Unhealthy Liveness probe failed: command timed out: "sh -c sleep 9" timed out after 1s`,
	}
	if got := f.events.list(); !slices.Equal(got, want) {
		t.Errorf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNotRunning: a container that is not running is not probed and reads
// as Failure; the worker stops only when the container will not restart.
func TestNotRunning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy v1.RestartPolicy
		code   int32
		keep   bool
	}{
		{"always", v1.RestartPolicyAlways, 0, true},
		{"on failure, failed", v1.RestartPolicyOnFailure, 1, true},
		{"on failure, succeeded", v1.RestartPolicyOnFailure, 0, false},
		{"never", v1.RestartPolicyNever, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			f := newFixture(t)
			pod := testPod("p1", nil, execProbe(nil), nil)
			pod.Spec.RestartPolicy = tc.policy
			w := f.worker(pod, Readiness)
			f.running(pod, "c1", epoch)
			w.step(ctx)
			f.exited(pod, "c1", tc.code)
			if keep := w.step(ctx); keep != tc.keep {
				t.Errorf("keep = %v, want %v", keep, tc.keep)
			}
			if r, _ := f.result(Readiness, "c1"); r != Failure {
				t.Errorf("result %v, want Failure", r)
			}
			if f.exec.count() != 1 {
				t.Errorf("probed an exited container")
			}
		})
	}
}

// TestRestartRules: a container restart rule keeps the worker waiting even
// when the pod would not restart the container.
func TestRestartRules(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", nil, execProbe(nil), nil)
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.Containers[0].RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
	pod.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
	w := f.worker(pod, Readiness)
	f.exited(pod, "c1", 42)
	if !w.step(ctx) {
		t.Error("stopped on an exit code the rules restart")
	}
	f.exited(pod, "c1", 1)
	if w.step(ctx) {
		t.Error("kept going on an exit code nothing restarts")
	}
}

// TestPodEnds: a terminal pod stops the worker; a pod being deleted turns
// liveness to Success and stops it.
func TestPodEnds(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", execProbe(nil), nil, nil)
	w := f.worker(pod, Liveness)
	f.running(pod, "c1", epoch)
	f.exec.answer(1, "", nil)
	w.step(ctx)

	deleted := pod.DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: epoch}
	w.pod.Store(deleted)
	if w.step(ctx) {
		t.Error("liveness kept going on a pod being deleted")
	}
	if r, _ := f.result(Liveness, "c1"); r != Success {
		t.Errorf("liveness %v on a pod being deleted, want Success", r)
	}

	w2 := f.worker(pod, Liveness)
	st, _ := f.status.GetPodStatus(pod.UID)
	st.Phase = v1.PodSucceeded
	f.status.set(pod.UID, st)
	if w2.step(ctx) {
		t.Error("kept going on a terminal pod")
	}
}

// TestAdoptedContainer: a container that ran before the manager started
// (an agent restart) keeps its readiness and started state from the pod's
// API status instead of flapping.
func TestAdoptedContainer(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", nil, execProbe(func(p *v1.Probe) { p.InitialDelaySeconds = 3600 }), execProbe(nil))
	old := epoch.Add(-time.Hour)
	pod.Status.ContainerStatuses = []v1.ContainerStatus{{
		Name: "app", ContainerID: "containerd://c1", Ready: true, Started: ptr.To(true),
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(old)}},
	}}
	ready, startup := f.worker(pod, Readiness), f.worker(pod, Startup)
	f.running(pod, "c1", old)
	ready.step(ctx)
	startup.step(ctx)
	if r, _ := f.result(Readiness, "c1"); r != Success {
		t.Errorf("adopted ready container: readiness %v, want Success", r)
	}
	if r, _ := f.result(Startup, "c1"); r != Success {
		t.Errorf("adopted started container: startup %v, want Success", r)
	}
	if f.exec.count() != 0 {
		t.Errorf("probed an adopted started container's startup probe")
	}

	// A container started just now gets the usual initial values.
	f2 := newFixture(t)
	ready2 := f2.worker(pod, Readiness)
	f2.running(pod, "c1", epoch)
	ready2.step(ctx)
	if r, _ := f2.result(Readiness, "c1"); r != Failure {
		t.Errorf("fresh container: readiness %v, want Failure", r)
	}
}

// TestResultNudgesReadiness: reading a readiness result that is not
// Success asks the worker to probe now, as upstream's status update does.
func TestResultNudgesReadiness(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	pod := testPod("p1", execProbe(nil), execProbe(nil), nil)
	ready, live := f.worker(pod, Readiness), f.worker(pod, Liveness)
	f.running(pod, "c1", epoch)
	f.exec.answer(1, "", nil)
	ready.step(ctx)
	live.step(ctx)
	f.m.Result(Liveness, cid("c1"))
	if len(live.pokeCh) != 0 {
		t.Error("a liveness read nudged the worker")
	}
	f.m.Result(Readiness, cid("c1"))
	f.m.Result(Readiness, cid("c1")) // never blocks
	if len(ready.pokeCh) != 1 {
		t.Error("a not-ready read did not nudge the readiness worker")
	}
	<-ready.pokeCh
	f.exec.answer(0, "", nil)
	ready.step(ctx)
	f.m.Result(Readiness, cid("c1"))
	if len(ready.pokeCh) != 0 {
		t.Error("a ready read nudged the worker")
	}
}

func TestWithDefaults(t *testing.T) {
	got := withDefaults(v1.Probe{SuccessThreshold: 3}, Liveness)
	want := v1.Probe{PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	if got != want {
		t.Errorf("liveness defaults %+v, want %+v", got, want)
	}
	if got := withDefaults(v1.Probe{SuccessThreshold: 3}, Readiness); got.SuccessThreshold != 3 {
		t.Errorf("readiness success threshold %d, want 3", got.SuccessThreshold)
	}
}

func TestTerminationGracePeriod(t *testing.T) {
	pod := testPod("p1", execProbe(func(p *v1.Probe) { p.TerminationGracePeriodSeconds = ptr.To[int64](5) }), execProbe(nil), execProbe(nil))
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	c := &pod.Spec.Containers[0]
	if g := TerminationGracePeriod(pod, c, Liveness); g == nil || *g != 5*time.Second {
		t.Errorf("liveness: %v, want 5s", g)
	}
	if g := TerminationGracePeriod(pod, c, Startup); g != nil {
		t.Errorf("startup without its own: %v, want nil", *g)
	}
	if g := TerminationGracePeriod(pod, c, Readiness); g != nil {
		t.Errorf("readiness: %v, want nil", *g)
	}
	pod.DeletionGracePeriodSeconds = ptr.To[int64](1)
	if g := TerminationGracePeriod(pod, c, Liveness); g != nil {
		t.Errorf("pod being deleted: %v, want nil", *g)
	}
}

func TestParseAndExpand(t *testing.T) {
	if id, ok := parseContainerID("containerd://abc"); !ok || id != cid("abc") {
		t.Errorf("parse: %v %v", id, ok)
	}
	for _, s := range []string{"", "abc", "://abc", "containerd://"} {
		if _, ok := parseContainerID(s); ok {
			t.Errorf("parsed %q", s)
		}
	}
	env := []v1.EnvVar{{Name: "A", Value: "x"}, {Name: "B", ValueFrom: &v1.EnvVarSource{}}}
	got := expandStatic([]string{"$(A)-$(B)-$(C)", "$$(A)", "a$", "$(A", "$x"}, env)
	want := []string{"x--$(C)", "$(A)", "a$", "$(A", "$x"}
	if !slices.Equal(got, want) {
		t.Errorf("expand = %q, want %q", got, want)
	}
}

// TestStoppedMidProbe: a probe cut short by the worker's stop records
// nothing.
func TestStoppedMidProbe(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	f := newFixture(t)
	pod := testPod("p1", execProbe(func(p *v1.Probe) { p.FailureThreshold = 1 }), nil, nil)
	w := f.worker(pod, Liveness)
	f.running(pod, "c1", epoch)
	w.step(ctx)
	cancel()
	f.exec.answer(-1, "", context.Canceled)
	w.step(ctx)
	if n := f.exec.count(); n != 2 {
		t.Errorf("%d exec calls, want no retry once stopped", n)
	}
	if r, _ := f.result(Liveness, "c1"); r != Success {
		t.Errorf("result %v, want the Success from before", r)
	}
	if ev := f.events.list(); len(ev) != 0 {
		t.Errorf("events %q", ev)
	}
}
