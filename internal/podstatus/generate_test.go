package podstatus

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
)

func readySandbox() []*nodekit.SandboxStatus {
	return []*nodekit.SandboxStatus{{ID: "sb", State: nodekit.SandboxReady, IPs: []string{"10.0.0.2"}}}
}

// TestGenerateConditions checks which conditions Generate returns, in which
// order, and where each comes from, as upstream's generateAPIPodStatus.
func TestGenerateConditions(t *testing.T) {
	const lb = v1.PodConditionType("example.com/lb")
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	pod := gate(testPod(v1.RestartPolicyAlways, ctr("a")), lb)
	pod.Generation = 4
	pod.Status.Conditions = []v1.PodCondition{
		{Type: lb, Status: v1.ConditionFalse, LastTransitionTime: then},
		{Type: v1.PodReady, Status: v1.ConditionTrue},                               // the agent's: regenerated
		{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: then}, // the agent's
		{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: "Deferred"},   // replaced by Extra
		{Type: "example.com/other", Status: v1.ConditionTrue},
	}
	old := &v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{
		{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet", LastTransitionTime: then},
		{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: then},
		{Type: "example.com/stale", Status: v1.ConditionTrue}, // not in the API status: dropped
	}}
	extra := v1.PodCondition{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue, ObservedGeneration: 3, LastTransitionTime: then}
	got := Generate(Input{
		Pod: pod, Old: old, Containers: statuses(running("a", true)), Sandboxes: readySandbox(),
		Initialized: true, Extra: []v1.PodCondition{extra}, Now: now,
	})
	if got.Phase != v1.PodRunning {
		t.Errorf("phase = %s, want Running", got.Phase)
	}
	type row struct {
		typ    v1.PodConditionType
		status v1.ConditionStatus
		gen    int64
		at     time.Time
	}
	wantRows := []row{
		{lb, v1.ConditionFalse, 0, then.Time},
		{"example.com/other", v1.ConditionTrue, 0, time.Time{}},
		{v1.PodResizeInProgress, v1.ConditionTrue, 3, then.Time},
		{v1.DisruptionTarget, v1.ConditionTrue, 0, then.Time},
		{v1.PodReadyToStartContainers, v1.ConditionTrue, 4, now},
		{v1.PodInitialized, v1.ConditionTrue, 4, now},
		{v1.PodReady, v1.ConditionFalse, 4, now},
		{v1.ContainersReady, v1.ConditionTrue, 4, now},
		{v1.PodScheduled, v1.ConditionTrue, 4, then.Time},
	}
	if len(got.Conditions) != len(wantRows) {
		t.Fatalf("conditions = %+v, want %d", got.Conditions, len(wantRows))
	}
	for i, w := range wantRows {
		c := got.Conditions[i]
		if c.Type != w.typ || c.Status != w.status || c.ObservedGeneration != w.gen || !c.LastTransitionTime.Time.Equal(w.at) {
			t.Errorf("condition %d = %s %s gen %d at %v, want %s %s gen %d at %v",
				i, c.Type, c.Status, c.ObservedGeneration, c.LastTransitionTime.Time, w.typ, w.status, w.gen, w.at)
		}
	}
	ready := Find(got.Conditions, v1.PodReady)
	if msg := `the status of pod readiness gate "example.com/lb" is not "True", but False`; ready.Reason != ReasonReadinessGatesNotReady || ready.Message != msg {
		t.Errorf("Ready = %q %q, want %s %q", ready.Reason, ready.Message, ReasonReadinessGatesNotReady, msg)
	}
	if pod.Status.Conditions[1].ObservedGeneration != 0 || len(old.Conditions) != 3 {
		t.Error("Generate modified its input")
	}
}

// TestGenerateStatus runs whole pods through Generate: phase, its reason and
// message, and the owned conditions' status, reason and message.
func TestGenerateStatus(t *testing.T) {
	type conds map[v1.PodConditionType]want
	cases := []struct {
		name       string
		in         Input
		wantPhase  v1.PodPhase
		wantReason string
		wantConds  conds
	}{
		{
			name: "init containers pending",
			in: Input{Pod: withInit(testPod(v1.RestartPolicyAlways, ctr("a")), ctr("i1"), ctr("i2")),
				InitContainers: statuses(completedInit("i1"), running("i2", false)), Containers: statuses(waiting("a")), Sandboxes: readySandbox()},
			wantPhase: v1.PodPending,
			wantConds: conds{
				v1.PodInitialized:  {v1.ConditionFalse, ReasonContainersNotInitialized, "containers with incomplete status: [i2]"},
				v1.ContainersReady: {v1.ConditionFalse, ReasonContainersNotReady, "containers with unready status: [a]"},
				v1.PodReady:        {v1.ConditionFalse, ReasonContainersNotReady, "containers with unready status: [a]"},
			},
		},
		{
			name:      "no sandbox yet",
			in:        Input{Pod: testPod(v1.RestartPolicyAlways, ctr("a")), Containers: statuses(waiting("a"))},
			wantPhase: v1.PodPending,
			wantConds: conds{
				v1.PodReadyToStartContainers: {v1.ConditionFalse, ReasonPodSandboxNotReady, MessageNoSandbox},
				v1.PodInitialized:            isTrue,
				v1.PodScheduled:              isTrue,
			},
		},
		{
			name: "sidecar unready keeps the pod unready",
			in: Input{Pod: withInit(testPod(v1.RestartPolicyAlways, ctr("a")), sidecar("s")),
				InitContainers: statuses(running("s", false)), Containers: statuses(running("a", true)), Sandboxes: readySandbox(), Initialized: true},
			wantPhase: v1.PodRunning,
			wantConds: conds{
				v1.PodInitialized: isTrue,
				v1.PodReady:       {v1.ConditionFalse, ReasonContainersNotReady, "containers with unready status: [s]"},
			},
		},
		{
			name: "Never pod failed",
			in: Input{Pod: testPod(v1.RestartPolicyNever, ctr("a"), ctr("b")), Old: &v1.PodStatus{Phase: v1.PodRunning, Reason: "R"},
				Containers: statuses(exited("a", 0), exited("b", 1)), Sandboxes: readySandbox(), Initialized: true},
			wantPhase: v1.PodFailed,
			wantConds: conds{
				v1.ContainersReady: {v1.ConditionFalse, ReasonPodFailed, ""},
				v1.PodReady:        {v1.ConditionFalse, ReasonPodFailed, ""},
			},
		},
		{
			name: "OnFailure pod restarting keeps its reason",
			in: Input{Pod: testPod(v1.RestartPolicyOnFailure, ctr("a")), Old: &v1.PodStatus{Phase: v1.PodRunning, Reason: "R"},
				Containers: statuses(backingOff("a", 1)), Sandboxes: readySandbox(), Initialized: true},
			wantPhase: v1.PodRunning, wantReason: "R",
			wantConds: conds{v1.PodReady: {v1.ConditionFalse, ReasonContainersNotReady, "containers with unready status: [a]"}},
		},
		{
			name: "Always pod succeeded once terminal",
			in: Input{Pod: withInit(testPod(v1.RestartPolicyAlways, ctr("a")), ctr("i")), Terminal: true,
				InitContainers: statuses(completedInit("i")), Containers: statuses(exited("a", 0)), Sandboxes: readySandbox(), Initialized: true},
			wantPhase: v1.PodSucceeded,
			wantConds: conds{
				v1.PodInitialized:  {v1.ConditionTrue, ReasonPodCompleted, ""},
				v1.ContainersReady: {v1.ConditionFalse, ReasonPodCompleted, ""},
				v1.PodReady:        {v1.ConditionFalse, ReasonPodCompleted, ""},
			},
		},
		{
			name: "restart rule keeps a Never pod running",
			in: Input{Pod: testPod(v1.RestartPolicyNever, withRules(ctr("a"), v1.ContainerRestartPolicyNever,
				restartOn(v1.ContainerRestartRuleOnExitCodesOpIn, 42))),
				Containers: statuses(backingOff("a", 42)), Sandboxes: readySandbox(), Initialized: true},
			wantPhase: v1.PodRunning,
		},
		{
			name: "evicted pod stays failed",
			in: Input{Pod: testPod(v1.RestartPolicyAlways, ctr("a")), Old: &v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "low on memory"},
				Containers: statuses(running("a", true)), Sandboxes: readySandbox(), Initialized: true},
			wantPhase: v1.PodFailed, wantReason: "Evicted",
			wantConds: conds{v1.ContainersReady: {v1.ConditionFalse, ReasonPodFailed, ""}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Generate(tc.in)
			if got.Phase != tc.wantPhase || got.Reason != tc.wantReason {
				t.Errorf("phase = %s %q, want %s %q", got.Phase, got.Reason, tc.wantPhase, tc.wantReason)
			}
			for typ, w := range tc.wantConds {
				c := Find(got.Conditions, typ)
				if c == nil {
					t.Errorf("%s missing from %+v", typ, got.Conditions)
					continue
				}
				check(t, *c, typ, w)
			}
		})
	}
}
