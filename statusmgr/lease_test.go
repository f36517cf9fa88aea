package statusmgr

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

func newHeartbeatFixture(t *testing.T) (*Heartbeat, *fake.Clientset, *clocktesting.FakeClock) {
	t.Helper()
	cs := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "node-uid"}})
	fc := clocktesting.NewFakeClock(t0)
	h, err := NewHeartbeat(clientgo.Wrap(cs), HeartbeatConfig{NodeName: "node1", Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	return h, cs, fc
}

func TestHeartbeatCreatesAndRenews(t *testing.T) {
	h, cs, fc := newHeartbeatFixture(t)
	if err := h.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	lease, err := cs.CoordinationV1().Leases("kube-node-lease").Get(t.Context(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *lease.Spec.HolderIdentity != "node1" || *lease.Spec.LeaseDurationSeconds != 40 || !lease.Spec.RenewTime.Time.Equal(t0) {
		t.Errorf("lease spec = %+v, want holder node1, 40s, renewed at %v", lease.Spec, t0)
	}
	if refs := lease.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != "node-uid" {
		t.Errorf("owner references = %+v, want the Node", refs)
	}

	// Renewals write from the last lease, without reading it.
	gets := countActions(cs, "get", "")
	fc.Step(10 * time.Second)
	if err := h.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	if countActions(cs, "get", "") != gets {
		t.Errorf("a renewal read the lease or the node first")
	}
	lease, _ = cs.CoordinationV1().Leases("kube-node-lease").Get(t.Context(), "node1", metav1.GetOptions{})
	if !lease.Spec.RenewTime.Time.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("renewTime = %v, want %v", lease.Spec.RenewTime, t0.Add(10*time.Second))
	}
}

func TestHeartbeatRecoversFromAConflict(t *testing.T) {
	h, cs, fc := newHeartbeatFixture(t)
	if err := h.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	conflicts := 1
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schemaGR("leases"), "node1", errors.New("changed"))
		}
		return false, nil, nil
	})
	fc.Step(10 * time.Second)
	if err := h.Renew(t.Context()); err != nil {
		t.Fatalf("renewal after a conflict: %v, want it to read the lease and retry", err)
	}
	lease, _ := cs.CoordinationV1().Leases("kube-node-lease").Get(t.Context(), "node1", metav1.GetOptions{})
	if !lease.Spec.RenewTime.Time.Equal(fc.Now()) {
		t.Errorf("renewTime = %v, want %v", lease.Spec.RenewTime, fc.Now())
	}
}

func TestHeartbeatWaitsForTheNode(t *testing.T) {
	cs := fake.NewClientset()
	h, err := NewHeartbeat(clientgo.Wrap(cs), HeartbeatConfig{NodeName: "node1", Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Renew(t.Context()); !apierrors.IsNotFound(err) {
		t.Fatalf("renewal without a Node: %v, want NotFound", err)
	}
	if n := countActions(cs, "create", ""); n != 0 {
		t.Errorf("lease created without an owner: %d creates", n)
	}
}

func TestHeartbeatRunBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, cs, fc := newHeartbeatFixture(t)
		failures := 0
		cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
			if failures > 0 {
				failures--
				return true, nil, apierrors.NewServiceUnavailable("etcd down")
			}
			return false, nil, nil
		})
		renewals := func() int { return countActions(cs, "update", "") + countActions(cs, "create", "") }
		stop := startInBubble(t, h.Run)
		defer stop()
		step := stepper(fc)
		if renewals() != 1 {
			t.Fatalf("%d writes at start, want the lease created", renewals())
		}
		step(10 * time.Second)
		if renewals() != 2 {
			t.Fatalf("%d writes after 10s, want one renewal", renewals()-1)
		}

		// Every write fails for a while: retries come after 200ms, 400ms,
		// ... up to 7s, then the 10s rhythm resumes.
		failures = 1 << 30
		step(10 * time.Second)
		attempts := func() int { return len(cs.Actions()) }
		for _, wait := range []time.Duration{200, 400, 800, 1600, 3200, 6400, 7000, 7000} {
			before := attempts()
			step(wait*time.Millisecond - time.Millisecond)
			if attempts() != before {
				t.Fatalf("retried before the %dms back-off", wait)
			}
			step(time.Millisecond)
			if attempts() == before {
				t.Fatalf("no retry after the %dms back-off", wait)
			}
		}
		failures = 0
		step(7 * time.Second)
		ok := renewals()
		step(10*time.Second - time.Millisecond)
		if renewals() != ok {
			t.Fatalf("renewed before 10s after recovering")
		}
		step(time.Millisecond)
		if renewals() != ok+1 {
			t.Fatalf("no renewal 10s after recovering")
		}
	})
}

func TestHeartbeatConfigValidation(t *testing.T) {
	if _, err := NewHeartbeat(clientgo.Wrap(fake.NewClientset()), HeartbeatConfig{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no node name: %v, want ErrInvalid", err)
	}
}
