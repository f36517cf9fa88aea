package allocation

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// Metrics are kubelet's in-place resize series, with upstream's names,
// labels and buckets:
//
//   - kubelet_container_requested_resizes_total{resource,requirement,operation}:
//     each change of a container's CPU or memory request or limit in a pod
//     update (ObservePodUpdate, a syncloop.UpdateObserver), operation add,
//     remove, increase or decrease;
//   - kubelet_pod_resize_duration_milliseconds{success}: each actuation of
//     a resize (Manager.Actuate);
//   - kubelet_pod_pending_resizes{reason,priority_bucket}: the pods with
//     PodResizePending now, by reason (deferred, infeasible) and priority;
//   - kubelet_pod_infeasible_resizes_total{reason_detail}: each resize
//     found infeasible (once per generation);
//   - kubelet_pod_in_progress_resizes: the pods with PodResizeInProgress;
//   - kubelet_pod_deferred_accepted_resizes_total{retry_trigger}: deferred
//     resizes allocated later, by what made the node decide again;
//   - kubelet_pod_deferred_resize_duration_seconds{resolution,priority_bucket}:
//     how long a resize stayed deferred before it was accepted, reverted
//     (the spec went back to the allocation) or its pod terminated.
//
// A nil *Metrics records nothing.
type Metrics struct {
	requested        *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	pending          *prometheus.GaugeVec
	infeasible       *prometheus.CounterVec
	inProgress       prometheus.Gauge
	deferredAccepted *prometheus.CounterVec
	deferredDuration *prometheus.HistogramVec
}

// The reason_detail labels of kubelet_pod_infeasible_resizes_total. The
// first two are upstream's; a pod-level change nodekit cannot make (the
// API server refuses both for API pods) has labels of its own.
const (
	InfeasibleStaticCPU       = "guaranteed_pod_cpu_manager_static_policy"
	InfeasibleStaticMemory    = "guaranteed_pod_memory_manager_static_policy"
	InfeasiblePodLevelRemoved = "pod_level_resources_removed"
	InfeasiblePodLevelOther   = "pod_level_resources_not_cpu_memory"
)

// The retry_trigger labels of kubelet_pod_deferred_accepted_resizes_total,
// upstream's.
const (
	TriggerPodResized   = "pod_resized"
	TriggerPodUpdated   = "pod_updated"
	TriggerPodsRemoved  = "pods_removed"
	TriggerPeriodic     = "periodic_retry"
	resolutionAccepted  = "accepted"
	resolutionReverted  = "reverted"
	resolutionTerminate = "terminated"
)

// NewMetrics builds the series; Register adds them to a registry.
func NewMetrics() *Metrics {
	const bucketHelp = "Label 'priority_bucket' classifies the pod priority (system-critical: >=2000000000, high: 100000..1999999999, medium: 1..99999, normal: 0/default, low: -999..-1, very-low: <=-1000, unknown: nil pod)."
	return &Metrics{
		requested: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kubelet", Name: "container_requested_resizes_total",
			Help: "[ALPHA] Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'requests' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'."},
			[]string{"resource", "requirement", "operation"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "kubelet", Name: "pod_resize_duration_milliseconds",
			Help:    "[ALPHA] Duration in milliseconds to actuate a pod resize",
			Buckets: []float64{10, 50, 100, 500, 1000, 2000, 5000, 10000, 20000, 30000, 60000, 120000, 300000, 600000}},
			[]string{"success"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "kubelet", Name: "pod_pending_resizes",
			Help: "[ALPHA] Number of pending resizes for pods. " + bucketHelp + " Label 'reason' describes the state (deferred, infeasible)."},
			[]string{"reason", "priority_bucket"}),
		infeasible: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kubelet", Name: "pod_infeasible_resizes_total",
			Help: "[ALPHA] Number of infeasible resizes for pods."}, []string{"reason_detail"}),
		inProgress: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "kubelet", Name: "pod_in_progress_resizes",
			Help: "[ALPHA] Number of in-progress resizes for pods."}),
		deferredAccepted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kubelet", Name: "pod_deferred_accepted_resizes_total",
			Help: "[ALPHA] Cumulative number of resizes that were accepted after being deferred."}, []string{"retry_trigger"}),
		deferredDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "kubelet", Name: "pod_deferred_resize_duration_seconds",
			Help:    "[ALPHA] Duration in seconds that a pod resize remains deferred before completion. " + bucketHelp + " Label 'resolution' describes how the deferred resize was resolved (accepted, reverted, terminated).",
			Buckets: []float64{5, 10, 15, 20, 30, 45, 60, 90, 120, 150, 180, 300, 600, 1200, 1800, 3600}},
			[]string{"resolution", "priority_bucket"}),
	}
}

// Register adds the series to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requested, m.duration, m.pending, m.infeasible, m.inProgress, m.deferredAccepted, m.deferredDuration} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ObservePodUpdate counts the container resizes an update of a running pod
// asks for (syncloop.UpdateObserver): each changed CPU or memory request
// or limit of an init or regular container, as upstream counts them when
// it hands the update to the pod's worker.
func (m *Metrics) ObservePodUpdate(_ context.Context, old, updated *v1.Pod) {
	if m == nil {
		return
	}
	for _, lists := range [][2][]v1.Container{
		{old.Spec.InitContainers, updated.Spec.InitContainers},
		{old.Spec.Containers, updated.Spec.Containers},
	} {
		for i := range lists[1] {
			nc := &lists[1][i]
			var oc *v1.Container
			for j := range lists[0] {
				if lists[0][j].Name == nc.Name {
					oc = &lists[0][j]
				}
			}
			if oc == nil {
				continue
			}
			m.countChanges(oc.Resources, nc.Resources)
		}
	}
}

func (m *Metrics) countChanges(old, updated v1.ResourceRequirements) {
	for _, r := range []struct {
		resource, requirement string
		old, updated          *resource.Quantity
	}{
		{"memory", "requests", old.Requests.Memory(), updated.Requests.Memory()},
		{"memory", "limits", old.Limits.Memory(), updated.Limits.Memory()},
		{"cpu", "requests", old.Requests.Cpu(), updated.Requests.Cpu()},
		{"cpu", "limits", old.Limits.Cpu(), updated.Limits.Cpu()},
	} {
		if op := resizeOperation(r.old, r.updated); op != "" {
			m.requested.WithLabelValues(r.resource, r.requirement, op).Inc()
		}
	}
}

// resizeOperation names the change from old to updated, "" for none.
func resizeOperation(old, updated *resource.Quantity) string {
	switch {
	case updated.IsZero() && !old.IsZero():
		return "remove"
	case old.IsZero() && !updated.IsZero():
		return "add"
	case updated.Cmp(*old) < 0:
		return "decrease"
	case updated.Cmp(*old) > 0:
		return "increase"
	}
	return ""
}

func (m *Metrics) observeActuation(ms float64, success bool) {
	if m == nil {
		return
	}
	label := "false"
	if success {
		label = "true"
	}
	m.duration.WithLabelValues(label).Observe(ms)
}

func (m *Metrics) countInfeasible(detail string) {
	if m == nil || detail == "" {
		return
	}
	m.infeasible.WithLabelValues(detail).Inc()
}

func (m *Metrics) acceptedAfterDeferral(trigger, bucket string, seconds float64) {
	if m == nil {
		return
	}
	m.deferredAccepted.WithLabelValues(trigger).Inc()
	m.deferredDuration.WithLabelValues(resolutionAccepted, bucket).Observe(seconds)
}

func (m *Metrics) deferralEnded(resolution, bucket string, seconds float64) {
	if m == nil {
		return
	}
	m.deferredDuration.WithLabelValues(resolution, bucket).Observe(seconds)
}

// setCounts publishes the pending and in-progress gauges from conds (the
// caller holds the Manager's lock).
func (m *Metrics) setCounts(conds map[types.UID]*podConditions) {
	if m == nil {
		return
	}
	type key struct{ reason, bucket string }
	pending := map[key]int{}
	inProgress := 0
	for _, c := range conds {
		if c.pending != nil {
			pending[key{strings.ToLower(c.pending.Reason), c.bucket}]++
		}
		if c.inProgress != nil {
			inProgress++
		}
	}
	m.pending.Reset()
	for k, n := range pending {
		m.pending.WithLabelValues(k.reason, k.bucket).Set(float64(n))
	}
	m.inProgress.Set(float64(inProgress))
}

// priorityBucket is upstream's priority_bucket label of a pod.
func priorityBucket(pod *v1.Pod) string {
	if pod == nil {
		return "unknown"
	}
	if pod.Spec.Priority == nil || *pod.Spec.Priority == 0 {
		return "normal"
	}
	switch p := *pod.Spec.Priority; {
	case p >= 2000000000:
		return "system-critical"
	case p >= 100000:
		return "high"
	case p > 0:
		return "medium"
	case p > -1000:
		return "low"
	default:
		return "very-low"
	}
}
