package podresources

import "github.com/prometheus/client_golang/prometheus"

// metrics are kubelet's podresources endpoint counters, labelled
// server_api_version "v1", counted as upstream counts them: every call
// handled (past the rate limit), each method's calls, and a Get of a pod
// that is not there. Upstream also registers pod_resources_endpoint_errors_list
// and _errors_get_allocatable but never increases them; nodekit leaves
// them out rather than serve series that cannot move.
type metrics struct {
	total, list, getAllocatable, get, getErrors *prometheus.CounterVec
}

func newMetrics() *metrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kubelet", Name: name, Help: "[ALPHA] " + help},
			[]string{"server_api_version"})
	}
	return &metrics{
		total: counter("pod_resources_endpoint_requests_total",
			"Cumulative number of requests to the PodResource endpoint. Broken down by server api version."),
		list: counter("pod_resources_endpoint_requests_list",
			"Number of requests to the PodResource List endpoint. Broken down by server api version."),
		getAllocatable: counter("pod_resources_endpoint_requests_get_allocatable",
			"Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version."),
		get: counter("pod_resources_endpoint_requests_get",
			"Number of requests to the PodResource Get endpoint. Broken down by server api version."),
		getErrors: counter("pod_resources_endpoint_errors_get",
			"Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version."),
	}
}

// RegisterMetrics registers kubelet's podresources endpoint series with
// reg: kubelet_pod_resources_endpoint_requests_total, _requests_list,
// _requests_get_allocatable, _requests_get and _errors_get.
func (s *Server) RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{s.metrics.total, s.metrics.list, s.metrics.getAllocatable, s.metrics.get, s.metrics.getErrors} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// count adds one call of the v1 method counted by c.
func (m *metrics) count(c *prometheus.CounterVec) {
	m.total.WithLabelValues("v1").Inc()
	c.WithLabelValues("v1").Inc()
}
