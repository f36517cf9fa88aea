package main

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/kubeletconfig"
	"github.com/nodekit/nodekit/pleg"
)

// TestPLEGFollowsEventedGate: as kubelet v1.37, the generic PLEG runs
// alone unless featureGates.EventedPLEG is on, even on a runtime that
// streams container events; with the gate, the evented PLEG runs over it.
func TestPLEGFollowsEventedGate(t *testing.T) {
	rt := agenttest.NewFakeRuntime(clock.RealClock{}) // streams events
	var _ pleg.ContainerEventer = rt
	for _, tc := range []struct {
		name    string
		gates   map[string]bool
		evented bool
	}{
		{"default", nil, false},
		{"gate off", map[string]bool{"EventedPLEG": false}, false},
		{"gate on", map[string]bool{"EventedPLEG": true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gates, err := kubeletconfig.NewGates(t.Context(), tc.gates)
			if err != nil {
				t.Fatal(err)
			}
			run := newPLEG(t.Context(), rt, pleg.NewCache(), gates, nil, nil)
			_, evented := run.(*pleg.Evented)
			_, generic := run.(*pleg.Generic)
			if evented != tc.evented || generic == tc.evented {
				t.Fatalf("evented PLEG %v, want %v (runs %T)", evented, tc.evented, run)
			}
		})
	}
}

// TestPLEGGateOnContainerd: on containerd (which streams container
// events), the agent sees a container exit and restart with the generic
// PLEG alone (the default) and with featureGates.EventedPLEG.
func TestPLEGGateOnContainerd(t *testing.T) {
	agenttest.SkipShort(t, "containerd and kube-apiserver")
	for _, tc := range []struct{ name, config string }{
		{"generic", ""},
		{"evented", "featureGates: {EventedPLEG: true}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t, envOption{config: tc.config})
			e.createPod(t, simplePod("exits", v1.RestartPolicyOnFailure, "sleep 1; exit 3"))
			p := e.waitPod(t, "exits", 90*time.Second, "a restart after exit code 3", func(p *v1.Pod) bool {
				c := containerStatus(p, "app")
				return c != nil && c.RestartCount >= 1 && c.LastTerminationState.Terminated != nil
			})
			if got := containerStatus(p, "app").LastTerminationState.Terminated.ExitCode; got != 3 {
				t.Fatalf("last exit code %d, want 3", got)
			}
		})
	}
}
