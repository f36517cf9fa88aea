package syncloop_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/syncloop"
)

// fakeDRA records PrepareResources/UnprepareResources and fails the first
// failPrepares prepares with "not reserved"; it notes what the runtime
// had been asked when each call came.
type fakeDRA struct {
	mu           sync.Mutex
	rt           *agenttest.FakeRuntime
	failPrepares int
	calls        []string
}

func (f *fakeDRA) PrepareResources(_ context.Context, pod *v1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "prepare "+string(pod.UID)+" after "+lastFor(f.rt.Calls(), pod))
	if f.failPrepares > 0 {
		f.failPrepares--
		return errors.New("claim not reserved")
	}
	return nil
}

func (f *fakeDRA) UnprepareResources(_ context.Context, pod *v1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "unprepare "+string(pod.UID)+" after "+lastFor(f.rt.Calls(), pod))
	return nil
}

// lastFor is the last runtime call naming pod ("nothing" if none).
func lastFor(calls []string, pod *v1.Pod) string {
	for i := len(calls) - 1; i >= 0; i-- {
		if strings.HasSuffix(calls[i], " "+pod.Namespace+"/"+pod.Name) {
			return calls[i][:strings.IndexByte(calls[i], ' ')]
		}
	}
	return "nothing"
}

// TestDynamicResourcesPreparedBeforeStartReleasedAfterKill: a pod with a
// claim waits (FailedPrepareDynamicResources, retried) until its claim
// prepares, its containers start only after, and the claim is released
// once the deleted pod's containers are killed; a pod without claims
// never calls the manager.
func TestDynamicResourcesPreparedBeforeStartReleasedAfterKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &recordedEvents{}
		dra := &fakeDRA{failPrepares: 1}
		n := agenttest.StartSimNode(t, agenttest.SimOptions{Runtime: func(f *agenttest.FakeRuntime) nodekit.Runtime {
			dra.rt = f // the manager reads the runtime's calls
			return f
		}, Loop: func(c *syncloop.Config) { c.DynamicResources, c.Recorder = dra, ev }})
		name := "claim"
		p := pod("u1", v1.RestartPolicyAlways, "app")
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}}
		n.AddPod(p, pod("plain", v1.RestartPolicyAlways, "app"))
		n.Settle(3 * time.Second)
		if got := ev.matching("Warning FailedPrepareDynamicResources"); len(got) != 1 ||
			got[0] != "Warning FailedPrepareDynamicResources Failed to prepare dynamic resources: claim not reserved" {
			t.Fatalf("events = %q", got)
		}
		if s := simStatus(t, n, "u1"); s.Phase != v1.PodRunning {
			t.Fatalf("pod after the retry: %s, want Running", s.Phase)
		}
		n.DeletePod(p) // graceful, 30 s
		n.Settle(3 * time.Second)

		dra.mu.Lock()
		calls := append([]string(nil), dra.calls...)
		dra.mu.Unlock()
		var prepares []string
		unprepares := 0
		for _, c := range calls {
			if strings.Contains(c, " plain ") {
				t.Fatalf("manager called for a pod without claims: %q", calls)
			}
			if strings.HasPrefix(c, "prepare ") {
				prepares = append(prepares, c)
			}
			if strings.HasPrefix(c, "unprepare ") {
				unprepares++
				if c != "unprepare u1 after KillPod" {
					t.Fatalf("unprepare before the pod was killed: %q", calls)
				}
			}
		}
		if len(prepares) < 2 || strings.Contains(prepares[0], "SyncPod") || strings.Contains(prepares[1], "SyncPod") {
			t.Fatalf("prepares = %q, want two (a failure and its retry) before the pod's first SyncPod", prepares)
		}
		if unprepares != 1 {
			t.Fatalf("unprepares = %d, want 1: %q", unprepares, calls)
		}
	})
}
