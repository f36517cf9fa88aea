package podstatus

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
)

// want is the part of a condition the tables assert.
type want struct {
	status  v1.ConditionStatus
	reason  string
	message string
}

func check(t *testing.T, got v1.PodCondition, typ v1.PodConditionType, w want) {
	t.Helper()
	if got.Type != typ || got.Status != w.status || got.Reason != w.reason || got.Message != w.message {
		t.Errorf("condition = %s %s %q %q, want %s %s %q %q", got.Type, got.Status, got.Reason, got.Message, typ, w.status, w.reason, w.message)
	}
	if got.ObservedGeneration != 1 {
		t.Errorf("%s observedGeneration = %d, want the pod's generation 1", got.Type, got.ObservedGeneration)
	}
}

var isTrue = want{status: v1.ConditionTrue}

func gate(p *v1.Pod, types ...v1.PodConditionType) *v1.Pod {
	for _, t := range types {
		p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, v1.PodReadinessGate{ConditionType: t})
	}
	return p
}

func TestContainersReady(t *testing.T) {
	always := v1.RestartPolicyAlways
	cases := []struct {
		name     string
		pod      *v1.Pod
		statuses []v1.ContainerStatus
		phase    v1.PodPhase
		want     want
	}{
		{"all ready", testPod(always, ctr("a"), ctr("b")), statuses(running("a", true), running("b", true)), v1.PodRunning, isTrue},
		{"unready listed by name", testPod(always, ctr("a"), ctr("b"), ctr("c")), statuses(running("a", true), running("b", false), waiting("c")), v1.PodRunning,
			want{v1.ConditionFalse, ReasonContainersNotReady, "containers with unready status: [b c]"}},
		{"unknown then unready", testPod(always, ctr("a"), ctr("b"), ctr("x")), statuses(running("a", true), running("b", false)), v1.PodRunning,
			want{v1.ConditionFalse, ReasonContainersNotReady, "containers with unknown status: [x], containers with unready status: [b]"}},
		{"no statuses", testPod(always, ctr("a")), nil, v1.PodPending, want{v1.ConditionFalse, ReasonUnknownContainerStatuses, ""}},
		{"succeeded", testPod(v1.RestartPolicyNever, ctr("a")), statuses(exited("a", 0)), v1.PodSucceeded, want{v1.ConditionFalse, ReasonPodCompleted, ""}},
		{"succeeded with unknown container", testPod(v1.RestartPolicyNever, ctr("a"), ctr("x")), statuses(exited("a", 0)), v1.PodSucceeded,
			want{v1.ConditionFalse, ReasonContainersNotReady, "containers with unknown status: [x], containers with unready status: [a]"}},
		{"failed", testPod(v1.RestartPolicyNever, ctr("a")), statuses(running("a", true)), v1.PodFailed, want{v1.ConditionFalse, ReasonPodFailed, ""}},
		{"unready sidecar counts", withInit(testPod(always, ctr("a")), ctr("i"), sidecar("s")), statuses(completedInit("i"), running("s", false), running("a", true)), v1.PodRunning,
			want{v1.ConditionFalse, ReasonContainersNotReady, "containers with unready status: [s]"}},
		{"ready sidecar, init containers not counted", withInit(testPod(always, ctr("a")), ctr("i"), sidecar("s")), statuses(exited("i", 0), running("s", true), running("a", true)), v1.PodRunning, isTrue},
		{"unknown sidecar", withInit(testPod(always, ctr("a")), sidecar("s")), statuses(running("a", true)), v1.PodRunning,
			want{v1.ConditionFalse, ReasonContainersNotReady, "containers with unknown status: [s]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, ContainersReady(tc.pod, tc.statuses, tc.phase), v1.ContainersReady, tc.want)
		})
	}
}

func TestReady(t *testing.T) {
	const lb, dns = v1.PodConditionType("example.com/lb"), v1.PodConditionType("example.com/dns")
	c := func(t v1.PodConditionType, s v1.ConditionStatus) v1.PodCondition {
		return v1.PodCondition{Type: t, Status: s}
	}
	ready := statuses(running("a", true))
	cases := []struct {
		name     string
		pod      *v1.Pod
		conds    []v1.PodCondition
		statuses []v1.ContainerStatus
		want     want
	}{
		{"no gates", testPod("", ctr("a")), nil, ready, isTrue},
		{"gate missing", gate(testPod("", ctr("a")), lb), nil, ready,
			want{v1.ConditionFalse, ReasonReadinessGatesNotReady, `corresponding condition of pod readiness gate "example.com/lb" does not exist.`}},
		{"gate False", gate(testPod("", ctr("a")), lb), []v1.PodCondition{c(lb, v1.ConditionFalse)}, ready,
			want{v1.ConditionFalse, ReasonReadinessGatesNotReady, `the status of pod readiness gate "example.com/lb" is not "True", but False`}},
		{"gate Unknown", gate(testPod("", ctr("a")), lb), []v1.PodCondition{c(lb, v1.ConditionUnknown)}, ready,
			want{v1.ConditionFalse, ReasonReadinessGatesNotReady, `the status of pod readiness gate "example.com/lb" is not "True", but Unknown`}},
		{"gate True", gate(testPod("", ctr("a")), lb), []v1.PodCondition{c(lb, v1.ConditionTrue)}, ready, isTrue},
		{"two gates unmet, in spec order", gate(testPod("", ctr("a")), dns, lb), []v1.PodCondition{c(lb, v1.ConditionFalse)}, ready,
			want{v1.ConditionFalse, ReasonReadinessGatesNotReady, `corresponding condition of pod readiness gate "example.com/dns" does not exist., ` +
				`the status of pod readiness gate "example.com/lb" is not "True", but False`}},
		{"one of two gates unmet", gate(testPod("", ctr("a")), dns, lb), []v1.PodCondition{c(lb, v1.ConditionTrue), c(dns, v1.ConditionFalse)}, ready,
			want{v1.ConditionFalse, ReasonReadinessGatesNotReady, `the status of pod readiness gate "example.com/dns" is not "True", but False`}},
		{"containers not ready hides the gates", gate(testPod("", ctr("a"), ctr("b")), lb), nil, statuses(running("a", true), running("b", false)),
			want{v1.ConditionFalse, ReasonContainersNotReady, "containers with unready status: [b]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, Ready(tc.pod, tc.conds, tc.statuses, v1.PodRunning), v1.PodReady, tc.want)
		})
	}
}

func TestInitialized(t *testing.T) {
	always := v1.RestartPolicyAlways
	initializedBefore := &v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodInitialized, Status: v1.ConditionTrue}}}
	cases := []struct {
		name     string
		pod      *v1.Pod
		old      *v1.PodStatus
		statuses []v1.ContainerStatus
		phase    v1.PodPhase
		want     want
	}{
		{"no init containers", testPod(always, ctr("a")), nil, statuses(waiting("a")), v1.PodPending, isTrue},
		{"no init containers, no statuses", testPod(always, ctr("a")), nil, nil, v1.PodPending, isTrue},
		{"init containers, no statuses", withInit(testPod(always, ctr("a")), ctr("i")), nil, nil, v1.PodPending,
			want{v1.ConditionFalse, ReasonUnknownContainerStatuses, ""}},
		{"init containers pending", withInit(testPod(always, ctr("a")), ctr("i1"), ctr("i2")), nil, statuses(completedInit("i1"), running("i2", false), waiting("a")), v1.PodPending,
			want{v1.ConditionFalse, ReasonContainersNotInitialized, "containers with incomplete status: [i2]"}},
		{"init containers not run yet", withInit(testPod(always, ctr("a")), ctr("i1"), ctr("i2")), nil, statuses(waiting("i1"), waiting("i2"), waiting("a")), v1.PodPending,
			want{v1.ConditionFalse, ReasonContainersNotInitialized, "containers with incomplete status: [i1 i2]"}},
		{"init container unknown and failed", withInit(testPod(always, ctr("a")), ctr("i1"), ctr("i2")), nil, statuses(exited("i1", 1), waiting("a")), v1.PodPending,
			want{v1.ConditionFalse, ReasonContainersNotInitialized, "containers with unknown status: [i2], containers with incomplete status: [i1]"}},
		{"all init containers done", withInit(testPod(always, ctr("a")), ctr("i1"), ctr("i2")), nil, statuses(completedInit("i1"), completedInit("i2"), waiting("a")), v1.PodPending, isTrue},
		{"sidecar not started", withInit(testPod(always, ctr("a")), ctr("i"), sidecar("s")), nil, statuses(completedInit("i"), runningNotStarted("s"), waiting("a")), v1.PodPending,
			want{v1.ConditionFalse, ReasonContainersNotInitialized, "containers with incomplete status: [s]"}},
		{"sidecar started though not ready", withInit(testPod(always, ctr("a")), sidecar("s")), nil, statuses(running("s", false), waiting("a")), v1.PodPending, isTrue},
		{"regular container started", withInit(testPod(always, ctr("a")), sidecar("s")), nil, statuses(waiting("s"), running("a", true)), v1.PodRunning, isTrue},
		{"succeeded", withInit(testPod(v1.RestartPolicyNever, ctr("a")), ctr("i")), nil, statuses(exited("i", 0), exited("a", 0)), v1.PodSucceeded,
			want{v1.ConditionTrue, ReasonPodCompleted, ""}},
		{"initialized before stays", withInit(testPod(always, ctr("a")), ctr("i")), initializedBefore, statuses(waiting("i"), waiting("a")), v1.PodPending, isTrue},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, Initialized(tc.pod, tc.old, tc.statuses, tc.phase), v1.PodInitialized, tc.want)
		})
	}
}

func TestReadyToStartContainers(t *testing.T) {
	sb := func(state nodekit.SandboxState, hostNet bool, ips ...string) *nodekit.SandboxStatus {
		return &nodekit.SandboxStatus{ID: "sb", State: state, HostNetwork: hostNet, IPs: ips}
	}
	hostNet := testPod("", ctr("a"))
	hostNet.Spec.HostNetwork = true
	notReady := func(msg string) want { return want{v1.ConditionFalse, ReasonPodSandboxNotReady, msg} }
	cases := []struct {
		name      string
		pod       *v1.Pod
		sandboxes []*nodekit.SandboxStatus
		want      want
	}{
		{"ready with IP", testPod("", ctr("a")), []*nodekit.SandboxStatus{sb(nodekit.SandboxReady, false, "10.0.0.2")}, isTrue},
		{"host network needs no IP", hostNet, []*nodekit.SandboxStatus{sb(nodekit.SandboxReady, true)}, isTrue},
		{"older sandbox gone", testPod("", ctr("a")), []*nodekit.SandboxStatus{sb(nodekit.SandboxReady, false, "10.0.0.3"), sb(nodekit.SandboxNotReady, false)}, isTrue},
		{"none", testPod("", ctr("a")), nil, notReady(MessageNoSandbox)},
		{"not ready", testPod("", ctr("a")), []*nodekit.SandboxStatus{sb(nodekit.SandboxNotReady, false, "10.0.0.2")}, notReady(MessageSandboxNotReady)},
		{"two ready", testPod("", ctr("a")), []*nodekit.SandboxStatus{sb(nodekit.SandboxReady, false, "10.0.0.2"), sb(nodekit.SandboxReady, false, "10.0.0.3")}, notReady(MessageMultipleSandboxes)},
		{"network mode changed", testPod("", ctr("a")), []*nodekit.SandboxStatus{sb(nodekit.SandboxReady, true, "10.0.0.2")}, notReady(MessageNetworkModeChanged)},
		{"no IP", testPod("", ctr("a")), []*nodekit.SandboxStatus{sb(nodekit.SandboxReady, false)}, notReady(MessageSandboxNoIPAddress)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, ReadyToStartContainers(tc.pod, tc.sandboxes), v1.PodReadyToStartContainers, tc.want)
		})
	}
}

func TestForceTerminalReadiness(t *testing.T) {
	cond := func(typ v1.PodConditionType, s v1.ConditionStatus) v1.PodCondition {
		return v1.PodCondition{Type: typ, Status: s}
	}
	cases := []struct {
		name       string
		phase      v1.PodPhase
		conds      []v1.PodCondition
		wantReason string // of both, "" when nothing is to change
	}{
		{"failed and ready", v1.PodFailed, []v1.PodCondition{cond(v1.PodReady, v1.ConditionTrue), cond(v1.ContainersReady, v1.ConditionTrue)}, ReasonPodFailed},
		{"succeeded, only Ready lagging", v1.PodSucceeded, []v1.PodCondition{cond(v1.PodReady, v1.ConditionTrue)}, ReasonPodCompleted},
		{"running stays ready", v1.PodRunning, []v1.PodCondition{cond(v1.PodReady, v1.ConditionTrue), cond(v1.ContainersReady, v1.ConditionTrue)}, ""},
		{"failed and not ready is left", v1.PodFailed, []v1.PodCondition{cond(v1.PodReady, v1.ConditionFalse), cond(v1.ContainersReady, v1.ConditionFalse)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(v1.RestartPolicyNever, ctr("a"))
			st := &v1.PodStatus{Phase: tc.phase, Conditions: tc.conds}
			before := st.DeepCopy()
			ForceTerminalReadiness(pod, st)
			if tc.wantReason == "" {
				if len(st.Conditions) != len(before.Conditions) || st.Conditions[0] != before.Conditions[0] {
					t.Fatalf("conditions changed to %+v", st.Conditions)
				}
				return
			}
			for _, typ := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady} {
				c := Find(st.Conditions, typ)
				if c == nil {
					t.Fatalf("%s missing in %+v", typ, st.Conditions)
				}
				check(t, *c, typ, want{v1.ConditionFalse, tc.wantReason, ""})
			}
		})
	}
}

func TestCarryTransitionTimes(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	gateTime := metav1.NewTime(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	old := &v1.PodStatus{Conditions: []v1.PodCondition{
		{Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: then},
		{Type: v1.PodInitialized, Status: v1.ConditionTrue, LastTransitionTime: then},
		{Type: v1.ContainersReady, Status: v1.ConditionFalse},
	}}
	next := &v1.PodStatus{Conditions: []v1.PodCondition{
		{Type: v1.PodReady, Status: v1.ConditionTrue},
		{Type: v1.PodInitialized, Status: v1.ConditionTrue},
		{Type: v1.ContainersReady, Status: v1.ConditionFalse},
		{Type: v1.PodScheduled, Status: v1.ConditionTrue},
		{Type: "example.com/lb", Status: v1.ConditionTrue, LastTransitionTime: gateTime},
		{Type: v1.PodResizePending, Status: v1.ConditionTrue},
	}}
	CarryTransitionTimes(old, next, now)
	wantTimes := map[v1.PodConditionType]time.Time{
		v1.PodReady:         now,           // changed
		v1.PodInitialized:   then.Time,     // unchanged: kept
		v1.ContainersReady:  now,           // unchanged, but old had no time
		v1.PodScheduled:     now,           // new
		"example.com/lb":    gateTime.Time, // not the agent's: left
		v1.PodResizePending: {},            // the caller's: left
	}
	for _, c := range next.Conditions {
		if !c.LastTransitionTime.Time.Equal(wantTimes[c.Type]) {
			t.Errorf("%s lastTransitionTime = %v, want %v", c.Type, c.LastTransitionTime.Time, wantTimes[c.Type])
		}
	}
}
