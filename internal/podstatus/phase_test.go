package podstatus

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestPhase checks Phase against what upstream's getPhase (kubelet v1.37.2,
// ContainerRestartRules on) gives for the same pod and statuses.
func TestPhase(t *testing.T) {
	never, onFailure, always := v1.RestartPolicyNever, v1.RestartPolicyOnFailure, v1.RestartPolicyAlways
	in, notIn := v1.ContainerRestartRuleOnExitCodesOpIn, v1.ContainerRestartRuleOnExitCodesOpNotIn
	static := func(p *v1.Pod) *v1.Pod {
		p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
		return p
	}
	cases := []struct {
		name        string
		pod         *v1.Pod
		statuses    []v1.ContainerStatus
		terminal    bool
		initialized bool
		want        v1.PodPhase
	}{
		// No statuses, waiting, unknown.
		{"no statuses", testPod(always, ctr("a")), nil, false, false, v1.PodPending},
		{"waiting to start", testPod(always, ctr("a"), ctr("b")), statuses(running("a", true), waiting("b")), false, false, v1.PodPending},
		{"one running one unknown", testPod(always, ctr("a"), ctr("b")), statuses(running("a", true)), false, false, v1.PodPending},
		{"all running", testPod(always, ctr("a"), ctr("b")), statuses(running("a", true), running("b", false)), false, false, v1.PodRunning},

		// restartPolicy Always: stopped containers restart.
		{"Always exited 0", testPod(always, ctr("a")), statuses(exited("a", 0)), false, false, v1.PodRunning},
		{"Always exited 1", testPod(always, ctr("a")), statuses(exited("a", 1)), false, false, v1.PodRunning},
		{"Always backing off", testPod(always, ctr("a")), statuses(backingOff("a", 1)), false, false, v1.PodRunning},
		{"Always empty policy is Always", testPod("", ctr("a")), statuses(exited("a", 2)), false, false, v1.PodRunning},
		{"Always terminal exited 0", testPod(always, ctr("a")), statuses(exited("a", 0)), true, false, v1.PodSucceeded},
		{"Always terminal exited 1", testPod(always, ctr("a"), ctr("b")), statuses(exited("a", 0), exited("b", 137)), true, false, v1.PodFailed},
		{"Always terminal static pod keeps restarting", static(testPod(always, ctr("a"))), statuses(exited("a", 0)), true, false, v1.PodRunning},

		// restartPolicy Never.
		{"Never exited 0", testPod(never, ctr("a")), statuses(exited("a", 0)), false, false, v1.PodSucceeded},
		{"Never exited 1", testPod(never, ctr("a"), ctr("b")), statuses(exited("a", 0), exited("b", 1)), false, false, v1.PodFailed},
		{"Never one still running", testPod(never, ctr("a"), ctr("b")), statuses(running("a", true), exited("b", 1)), false, false, v1.PodRunning},
		{"Never waiting after exit counts as stopped", testPod(never, ctr("a")), statuses(backingOff("a", 0)), false, false, v1.PodFailed},

		// restartPolicy OnFailure.
		{"OnFailure exited 0", testPod(onFailure, ctr("a")), statuses(exited("a", 0)), false, false, v1.PodSucceeded},
		{"OnFailure exited 1 restarts", testPod(onFailure, ctr("a")), statuses(exited("a", 1)), false, false, v1.PodRunning},
		{"OnFailure backing off", testPod(onFailure, ctr("a"), ctr("b")), statuses(exited("a", 0), backingOff("b", 1)), false, false, v1.PodRunning},
		{"OnFailure terminal exited 1", testPod(onFailure, ctr("a")), statuses(exited("a", 1)), true, false, v1.PodFailed},

		// Init containers.
		{"init running", withInit(testPod(always, ctr("a")), ctr("i")), statuses(running("i", false), waiting("a")), false, false, v1.PodPending},
		{"init unknown", withInit(testPod(always, ctr("a")), ctr("i")), statuses(waiting("a")), false, false, v1.PodPending},
		{"init waiting first start", withInit(testPod(always, ctr("a")), ctr("i")), statuses(waiting("i"), waiting("a")), false, false, v1.PodPending},
		{"init done, main running", withInit(testPod(always, ctr("a")), ctr("i")), statuses(completedInit("i"), running("a", true)), false, false, v1.PodRunning},
		{"init failed Never", withInit(testPod(never, ctr("a")), ctr("i")), statuses(exited("i", 1), waiting("a")), false, false, v1.PodFailed},
		{"init backing off Never", withInit(testPod(never, ctr("a")), ctr("i")), statuses(backingOff("i", 1), waiting("a")), false, false, v1.PodFailed},
		{"init failed OnFailure reruns", withInit(testPod(onFailure, ctr("a")), ctr("i")), statuses(exited("i", 1), waiting("a")), false, false, v1.PodPending},
		{"init failed Always reruns", withInit(testPod(always, ctr("a")), ctr("i")), statuses(backingOff("i", 1), waiting("a")), false, false, v1.PodPending},

		// Sidecars (restartable init containers).
		{"sidecar not started, not initialized", withInit(testPod(always, ctr("a")), sidecar("s")), statuses(runningNotStarted("s"), waiting("a")), false, false, v1.PodPending},
		{"sidecar not started after initialization", withInit(testPod(always, ctr("a")), sidecar("s")), statuses(runningNotStarted("s"), running("a", true)), false, true, v1.PodRunning},
		{"sidecar waiting first start", withInit(testPod(always, ctr("a")), sidecar("s")), statuses(waiting("s"), running("a", true)), false, true, v1.PodPending},
		{"sidecar started, main running", withInit(testPod(always, ctr("a")), sidecar("s")), statuses(running("s", true), running("a", true)), false, true, v1.PodRunning},
		{"sidecar running, main done Never", withInit(testPod(never, ctr("a")), sidecar("s")), statuses(running("s", true), exited("a", 0)), false, true, v1.PodRunning},
		{"sidecar stopped, main done Never", withInit(testPod(never, ctr("a")), sidecar("s")), statuses(exited("s", 137), exited("a", 0)), false, true, v1.PodSucceeded},
		{"sidecar backing off, main failed Never", withInit(testPod(never, ctr("a")), sidecar("s")), statuses(backingOff("s", 1), exited("a", 2)), false, true, v1.PodFailed},
		{"sidecar unknown", withInit(testPod(never, ctr("a")), sidecar("s")), statuses(exited("a", 0)), false, true, v1.PodPending},

		// Container restart rules (restartrules decides, as the sync loop).
		{"rule restarts exit 42 in Never pod", testPod(never, withRules(ctr("a"), v1.ContainerRestartPolicyNever, restartOn(in, 42))),
			statuses(exited("a", 42)), false, false, v1.PodRunning},
		{"rule does not match exit 1", testPod(never, withRules(ctr("a"), v1.ContainerRestartPolicyNever, restartOn(in, 42))),
			statuses(exited("a", 1)), false, false, v1.PodFailed},
		{"rule NotIn restarts all but 0", testPod(never, withRules(ctr("a"), v1.ContainerRestartPolicyNever, restartOn(notIn, 0))),
			statuses(backingOff("a", 3)), false, false, v1.PodRunning},
		{"rule NotIn 0 lets exit 0 end", testPod(never, withRules(ctr("a"), v1.ContainerRestartPolicyNever, restartOn(notIn, 0))),
			statuses(exited("a", 0)), false, false, v1.PodSucceeded},
		{"container OnFailure in Never pod", testPod(never, withRules(ctr("a"), v1.ContainerRestartPolicyOnFailure)),
			statuses(exited("a", 1)), false, false, v1.PodRunning},
		{"container Never in Always pod", testPod(always, withRules(ctr("a"), v1.ContainerRestartPolicyNever)),
			statuses(exited("a", 1)), false, false, v1.PodFailed},
		{"rule restarts a terminal pod's container no more", testPod(never, withRules(ctr("a"), v1.ContainerRestartPolicyNever, restartOn(in, 42))),
			statuses(exited("a", 42)), true, false, v1.PodFailed},
		{"init rule restarts exit 7 in Never pod", withInit(testPod(never, ctr("a")), withRules(ctr("i"), v1.ContainerRestartPolicyNever, restartOn(in, 7))),
			statuses(backingOff("i", 7), waiting("a")), false, false, v1.PodPending},
		{"init rule does not match", withInit(testPod(never, ctr("a")), withRules(ctr("i"), v1.ContainerRestartPolicyNever, restartOn(in, 7))),
			statuses(exited("i", 8), waiting("a")), false, false, v1.PodFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Phase(tc.pod, tc.statuses, tc.terminal, tc.initialized); got != tc.want {
				t.Errorf("Phase = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestMergePhase(t *testing.T) {
	st := func(p v1.PodPhase, reason, msg string) *v1.PodStatus {
		return &v1.PodStatus{Phase: p, Reason: reason, Message: msg}
	}
	cases := []struct {
		name       string
		api, old   *v1.PodStatus
		generated  v1.PodPhase
		wantPhase  v1.PodPhase
		wantReason string
		wantMsg    string
	}{
		{"new phase drops old reason", st(v1.PodPending, "", ""), st(v1.PodPending, "R", "M"), v1.PodRunning, v1.PodRunning, "", ""},
		{"same phase keeps old reason", st("", "", ""), st(v1.PodRunning, "R", "M"), v1.PodRunning, v1.PodRunning, "R", "M"},
		{"same phase falls back to API reason", st(v1.PodRunning, "AR", "AM"), st(v1.PodRunning, "", ""), v1.PodRunning, v1.PodRunning, "AR", "AM"},
		{"old terminal is kept", st(v1.PodRunning, "", ""), st(v1.PodFailed, "Evicted", "low memory"), v1.PodRunning, v1.PodFailed, "Evicted", "low memory"},
		{"API terminal is kept", st(v1.PodSucceeded, "", ""), st(v1.PodRunning, "", ""), v1.PodPending, v1.PodSucceeded, "", ""},
		{"generated terminal wins over running", st(v1.PodRunning, "", ""), st(v1.PodRunning, "R", ""), v1.PodFailed, v1.PodFailed, "", ""},
		{"API terminal beats another terminal", st(v1.PodSucceeded, "", ""), st(v1.PodRunning, "", ""), v1.PodFailed, v1.PodSucceeded, "", ""},
		{"nil old", st("", "", ""), nil, v1.PodPending, v1.PodPending, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(v1.RestartPolicyAlways, ctr("a"))
			pod.Status = *tc.api
			p, r, m := MergePhase(pod, tc.old, tc.generated)
			if p != tc.wantPhase || r != tc.wantReason || m != tc.wantMsg {
				t.Errorf("MergePhase = %s %q %q, want %s %q %q", p, r, m, tc.wantPhase, tc.wantReason, tc.wantMsg)
			}
		})
	}
}
