package allocation_test

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/allocation"
)

func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }

// cgroup is what a fake pod cgroup holds: shares, quota over 100ms, memory.
func cgroup(shares uint64, quota, memory int64) allocation.PodCgroupValues {
	return allocation.PodCgroupValues{CPUShares: u64(shares), CPUQuota: i64(quota), CPUPeriod: u64(100000), Memory: i64(memory)}
}

// TestManagerPodLevelStatusFromCgroup: a running pod's status.resources
// shows what its pod cgroup holds, not what was allocated and applied;
// what cannot be read shows the applied values, the error logged.
func TestManagerPodLevelStatusFromCgroup(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var read allocation.PodCgroupValues
	var readErr error
	var readPods []string
	rec := &recorder{}
	m, err := allocation.New(allocation.Config{
		Containers: rec, PodCgroup: rec,
		PodCgroupReader: allocation.PodCgroupReaderFunc(func(_ context.Context, pod *v1.Pod) (allocation.PodCgroupValues, error) {
			readPods = append(readPods, string(pod.UID))
			return read, readErr
		}),
		Clock: clocktesting.NewFakePassiveClock(time.Unix(1, 0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf("p", ctr("c", v1.ResourceRequirements{}))
	pod.Spec.Resources = podLevel("cpu=200m,memory=64Mi", "cpu=400m,memory=128Mi")
	got, err := m.Allocate(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	status := func(phase v1.PodPhase) *v1.PodStatus {
		// The phase the API server has, which SetStatus goes by; the
		// status being generated says Running in either case.
		p := got.DeepCopy()
		p.Status.Phase = phase
		st := &v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "c"}}}
		m.SetStatus(ctx, p, nil, st)
		return st
	}
	for _, tc := range []struct {
		name string
		read allocation.PodCgroupValues
		err  error
		want *v1.ResourceRequirements
	}{{
		// 307 shares are 300m (rounded up); 50ms of 100ms is 500m.
		name: "cgroup differs from the allocation",
		read: cgroup(307, 50000, 256<<20),
		want: podLevel("cpu=300m,memory=64Mi", "cpu=500m,memory=256Mi"),
	}, {
		name: "read fails",
		err:  errors.New("no such cgroup"),
		want: podLevel("cpu=200m,memory=64Mi", "cpu=400m,memory=128Mi"),
	}, {
		name: "memory unread",
		read: allocation.PodCgroupValues{CPUShares: u64(512), CPUQuota: i64(-1), CPUPeriod: u64(100000)},
		err:  errors.New("no memory.max"),
		// No quota, and no old status to keep a limit from: the spec's
		// stays, as upstream starts from spec.resources.
		want: podLevel("cpu=500m,memory=64Mi", "cpu=400m,memory=128Mi"),
	}, {
		name: "cpu unread",
		read: allocation.PodCgroupValues{Memory: i64(96 << 20)},
		err:  errors.New("no cpu.max"),
		want: podLevel("cpu=200m,memory=64Mi", "cpu=400m,memory=96Mi"),
	}} {
		read, readErr, readPods = tc.read, tc.err, nil
		st := status(v1.PodRunning)
		if !apiequality.Semantic.DeepEqual(st.Resources, tc.want) {
			t.Errorf("%s: resources = %v, want %v", tc.name, st.Resources, tc.want)
		}
		if want := list("cpu=200m,memory=64Mi"); !apiequality.Semantic.DeepEqual(st.AllocatedResources, want) {
			t.Errorf("%s: allocatedResources = %v, want the allocation %v", tc.name, st.AllocatedResources, want)
		}
		if len(readPods) != 1 || readPods[0] != "p" {
			t.Errorf("%s: pod cgroups read = %q, want p's once", tc.name, readPods)
		}
	}
	// A pod the API server does not have Running reports its allocation
	// (as upstream, though the status being generated is Running); no
	// cgroup is read.
	read, readErr, readPods = cgroup(307, 50000, 256<<20), nil, nil
	if st := status(v1.PodPending); !apiequality.Semantic.DeepEqual(st.Resources, pod.Spec.Resources) || len(readPods) != 0 {
		t.Errorf("pending pod: resources = %v (cgroups read %q), want the allocation, none read", st.Resources, readPods)
	}
}

// TestPodLevelStatusRules: upstream's floors, cgroup v2's round trip and
// the values kept from the old status.
func TestPodLevelStatusRules(t *testing.T) {
	running := &v1.PodStatus{Phase: v1.PodRunning, Resources: podLevel("cpu=250m", "cpu=700m,memory=100Mi")}
	for _, tc := range []struct {
		name           string
		spec           *v1.ResourceRequirements
		read           allocation.PodCgroupValues
		old            *v1.PodStatus
		wantR, wantLim string
	}{{
		// 200m is 204 shares, weight 8 on v2, read back as 185 shares
		// (181m): the allocated 200m is shown.
		name: "v2 round trip", spec: podLevel("cpu=200m", "cpu=400m,memory=128Mi"),
		read: cgroup(185, 40000, 128<<20), wantR: "cpu=200m", wantLim: "cpu=400m,memory=128Mi",
	}, {
		// 185 shares are not what 300m becomes (290): a real change.
		name: "not a round trip", spec: podLevel("cpu=300m", "cpu=400m,memory=128Mi"),
		read: cgroup(185, 40000, 128<<20), wantR: "cpu=181m", wantLim: "cpu=400m,memory=128Mi",
	}, {
		// At or below 2m and 10m both, the allocated values stay.
		name: "floors", spec: podLevel("cpu=1m", "cpu=5m"),
		read: cgroup(2, 1000, -1), wantR: "cpu=1m", wantLim: "cpu=5m",
	}, {
		name: "above a floor", spec: podLevel("cpu=1m", "cpu=5m"),
		read: cgroup(20, 2000, -1), wantR: "cpu=20m", wantLim: "cpu=20m",
	}, {
		// Unlimited in the cgroup: the old Running status's values stay.
		name: "kept from old", spec: podLevel("cpu=250m", "memory=128Mi"),
		read: allocation.PodCgroupValues{CPUShares: u64(256), CPUQuota: i64(-1), CPUPeriod: u64(100000), Memory: i64(-1)},
		old:  running, wantR: "cpu=250m", wantLim: "cpu=700m,memory=100Mi",
	}, {
		name: "old not running", spec: podLevel("cpu=250m", "memory=128Mi"),
		read: allocation.PodCgroupValues{CPUShares: u64(256), CPUQuota: i64(-1), CPUPeriod: u64(100000), Memory: i64(-1)},
		old:  &v1.PodStatus{Phase: v1.PodPending, Resources: running.Resources}, wantR: "cpu=250m", wantLim: "memory=128Mi",
	}} {
		pod := podOf("p", ctr("c", reqs("memory=32Mi", "")))
		pod.Spec.Resources = tc.spec
		r := allocation.ResourcesFromCgroup(tc.read)
		_, got := allocation.PodLevelStatus(pod, &r, tc.old)
		// The memory request comes from the containers when the pod has none.
		want := &v1.ResourceRequirements{Requests: list(tc.wantR + ",memory=32Mi"), Limits: list(tc.wantLim)}
		if !apiequality.Semantic.DeepEqual(got, want) {
			t.Errorf("%s: resources = %v, want %v", tc.name, got, want)
		}
	}
}
