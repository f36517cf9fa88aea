package allocation_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/allocation"
)

// The resize series move as upstream's do through a deferred resize that
// is accepted once another pod leaves, an infeasible one, and a pod update.
func TestManagerMetrics(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rec := &recorder{usage: map[string]uint64{}}
	metrics := allocation.NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	if err := metrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	var pods []*v1.Pod
	m, err := allocation.New(allocation.Config{
		Fit: fitOn("cpu=2,memory=4Gi"), Pods: func() []*v1.Pod { return pods },
		Containers: rec, PodCgroup: rec, Usage: rec, Clock: clk, Metrics: metrics,
		Node: allocation.NodeConfig{CPUManagerStatic: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf("p", ctr("c", reqs("cpu=500m", "cpu=1")))
	hog := podOf("hog", ctr("h", reqs("cpu=1", "")))
	pods = []*v1.Pod{pod, hog}
	for _, p := range pods {
		if _, err := m.Allocate(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	resized := pod.DeepCopy()
	resized.Generation = 2
	resized.Spec.Containers[0].Resources = reqs("cpu=1500m", "cpu=1500m")
	metrics.ObservePodUpdate(ctx, pod, resized) // cpu requests and limits increase
	for i := 0; i < 3; i++ {                    // the periodic sync decides again: still one pending
		if _, err := m.Allocate(ctx, resized); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, reg, `
# HELP kubelet_pod_pending_resizes [ALPHA] Number of pending resizes for pods. Label 'priority_bucket' classifies the pod priority (system-critical: >=2000000000, high: 100000..1999999999, medium: 1..99999, normal: 0/default, low: -999..-1, very-low: <=-1000, unknown: nil pod). Label 'reason' describes the state (deferred, infeasible).
# TYPE kubelet_pod_pending_resizes gauge
kubelet_pod_pending_resizes{priority_bucket="normal",reason="deferred"} 1
`, "kubelet_pod_pending_resizes")

	// The hog leaves 40 s later: the retry it queues accepts the resize.
	clk.Step(40 * time.Second)
	pods = []*v1.Pod{resized}
	if err := m.Forget(hog.UID); err != nil {
		t.Fatal(err)
	}
	got, err := m.Allocate(ctx, resized)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Actuate(ctx, got, running(got, "c")); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, `
# HELP kubelet_container_requested_resizes_total [ALPHA] Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'requests' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.
# TYPE kubelet_container_requested_resizes_total counter
kubelet_container_requested_resizes_total{operation="increase",requirement="limits",resource="cpu"} 1
kubelet_container_requested_resizes_total{operation="increase",requirement="requests",resource="cpu"} 1
# HELP kubelet_pod_deferred_accepted_resizes_total [ALPHA] Cumulative number of resizes that were accepted after being deferred.
# TYPE kubelet_pod_deferred_accepted_resizes_total counter
kubelet_pod_deferred_accepted_resizes_total{retry_trigger="pods_removed"} 1
`, "kubelet_container_requested_resizes_total", "kubelet_pod_deferred_accepted_resizes_total")
	if n := testutil.CollectAndCount(reg, "kubelet_pod_pending_resizes"); n != 0 {
		t.Errorf("pending resize series after the acceptance: %d, want 0", n)
	}
	if s := histogram(t, reg, "kubelet_pod_deferred_resize_duration_seconds"); s.count != 1 || s.sum != 40 {
		t.Errorf("deferred duration: %d observations summing %v s, want 1 of 40 s", s.count, s.sum)
	}
	if s := histogram(t, reg, "kubelet_pod_resize_duration_milliseconds"); s.count != 1 {
		t.Errorf("resize duration observations: %d, want 1", s.count)
	}

	// A Guaranteed pod's CPU under the static policy: infeasible, counted
	// once however often it is decided.
	g := podOf("g", ctr("c", reqs("cpu=1,memory=1Gi", "cpu=1,memory=1Gi")))
	pods = append(pods, g)
	if _, err := m.Allocate(ctx, g); err != nil {
		t.Fatal(err)
	}
	gr := g.DeepCopy()
	gr.Generation = 2
	gr.Spec.Containers[0].Resources = reqs("cpu=2,memory=1Gi", "cpu=2,memory=1Gi")
	for i := 0; i < 2; i++ {
		if _, err := m.Allocate(ctx, gr); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, reg, `
# HELP kubelet_pod_infeasible_resizes_total [ALPHA] Number of infeasible resizes for pods.
# TYPE kubelet_pod_infeasible_resizes_total counter
kubelet_pod_infeasible_resizes_total{reason_detail="guaranteed_pod_cpu_manager_static_policy"} 1
`, "kubelet_pod_infeasible_resizes_total")
	if err := m.Forget(g.UID); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "kubelet_pod_pending_resizes"); n != 0 {
		t.Errorf("pending resize series after the pod left: %d, want 0", n)
	}
}

func expect(t *testing.T, reg prometheus.Gatherer, text string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(text), names...); err != nil {
		t.Error(err)
	}
}

type histo struct {
	count uint64
	sum   float64
}

func histogram(t *testing.T, reg prometheus.Gatherer, name string) histo {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var h histo
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			h.count += m.GetHistogram().GetSampleCount()
			h.sum += m.GetHistogram().GetSampleSum()
		}
	}
	return h
}
