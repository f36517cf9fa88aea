package pleg_test

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
)

// listOnly hides the fake runtime's container events: a runtime that can
// only be listed, as a Virtual Kubelet provider without notifications.
type listOnly struct{ rt *agenttest.FakeRuntime }

func (l listOnly) ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error) {
	return l.rt.ListPods(ctx, all)
}

func (l listOnly) GetPodStatus(ctx context.Context, uid types.UID, name, ns string) (*nodekit.PodStatus, error) {
	return l.rt.GetPodStatus(ctx, uid, name, ns)
}

// New chooses the evented PLEG for a runtime that streams container events
// unless told to relist only, and the relist PLEG for one that cannot; the
// PLEG it returns relists into the cache it was given.
func TestNewChoosesByCapability(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(100, 0))
	rt := agenttest.NewFakeRuntime(clk)
	for _, tc := range []struct {
		name    string
		rt      pleg.Runtime
		opts    pleg.Options
		evented bool
	}{
		{"events", rt, pleg.Options{Clock: clk}, true},
		{"events, relist only", rt, pleg.Options{Clock: clk, RelistOnly: true}, false},
		{"no events", listOnly{rt}, pleg.Options{Clock: clk}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := pleg.NewCache()
			p := pleg.New(tc.rt, cache, tc.opts)
			_, evented := p.(*pleg.Evented)
			_, generic := p.(*pleg.Generic)
			if evented != tc.evented || generic == tc.evented {
				t.Fatalf("New returned %T, want evented %v", p, tc.evented)
			}
			uid := types.UID("uid-" + tc.name)
			pod := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: uid},
				Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
			}
			rt.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
			p.Relist(t.Context())
			if err := p.Healthy(); err != nil {
				t.Fatalf("healthy after a relist: %v", err)
			}
			st, err := cache.Get(uid)
			if err != nil || st.FindContainer("app") == nil || st.FindContainer("app").State != nodekit.StateRunning {
				t.Fatalf("cache after a relist: %+v, %v; want app running", st, err)
			}
			if len(p.Events()) == 0 {
				t.Fatal("no event after the container started")
			}
		})
	}
}
