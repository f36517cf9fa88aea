package server

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"
)

// Metric names, as upstream kubelet's (so dashboards and alerts written for
// kubelet work unchanged).
const (
	MetricPodWorkerDuration  = "kubelet_pod_worker_duration_seconds"
	MetricPLEGRelistDuration = "kubelet_pleg_relist_duration_seconds"
	MetricPLEGRelistInterval = "kubelet_pleg_relist_interval_seconds"
	MetricRunningPods        = "kubelet_running_pods"
	MetricRunningContainers  = "kubelet_running_containers"
	MetricEvictions          = "kubelet_evictions"
	MetricProbeTotal         = "prober_probe_total"
	MetricProbeDuration      = "prober_probe_duration_seconds"
	MetricHTTPRequests       = "kubelet_http_requests_total"
	MetricHTTPInflight       = "kubelet_http_inflight_requests"
	MetricHTTPDuration       = "kubelet_http_requests_duration_seconds"
)

// AgentMetrics are the node agent's own metrics. The packages that produce
// the numbers do not import this one: they declare the one or two methods
// they call, and the agent's wiring hands them this value.
type AgentMetrics struct {
	// PodWorkerDuration: seconds to sync one pod, by operation_type
	// (create, update, sync, kill).
	PodWorkerDuration *prometheus.HistogramVec
	// PLEGRelistDuration: seconds one relist took.
	PLEGRelistDuration prometheus.Histogram
	// PLEGRelistInterval: seconds between the starts of two relists.
	PLEGRelistInterval prometheus.Histogram
	// RunningPods: pods with a running sandbox.
	RunningPods prometheus.Gauge
	// RunningContainers: containers by container_state (created,
	// running, exited, unknown).
	RunningContainers *prometheus.GaugeVec
	// Evictions: pods evicted, by eviction_signal.
	Evictions *prometheus.CounterVec
}

// RegisterAgentMetrics creates the agent's metrics and registers them with
// reg (for example a prometheus.NewRegistry() also given to Config.Metrics).
// It fails if any is already registered there.
func RegisterAgentMetrics(reg prometheus.Registerer) (*AgentMetrics, error) {
	m := &AgentMetrics{
		PodWorkerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricPodWorkerDuration, Buckets: prometheus.DefBuckets,
			Help: "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
		}, []string{"operation_type"}),
		PLEGRelistDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: MetricPLEGRelistDuration, Buckets: prometheus.DefBuckets,
			Help: "Duration in seconds for relisting pods in PLEG.",
		}),
		PLEGRelistInterval: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: MetricPLEGRelistInterval, Buckets: prometheus.DefBuckets,
			Help: "Interval in seconds between relisting in PLEG.",
		}),
		RunningPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricRunningPods, Help: "Number of pods that have a running pod sandbox",
		}),
		RunningContainers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricRunningContainers, Help: "Number of containers currently running",
		}, []string{"container_state"}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricEvictions, Help: "Cumulative number of pod evictions by eviction signal",
		}, []string{"eviction_signal"}),
	}
	for _, c := range []prometheus.Collector{m.PodWorkerDuration, m.PLEGRelistDuration, m.PLEGRelistInterval, m.RunningPods, m.RunningContainers, m.Evictions} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register agent metrics: %w", err)
		}
	}
	return m, nil
}

// ObservePodWorker records one pod sync of the given operation type.
func (m *AgentMetrics) ObservePodWorker(operation string, d time.Duration) {
	m.PodWorkerDuration.WithLabelValues(operation).Observe(d.Seconds())
}

// ObserveRelist records one PLEG relist: how long it took and the time
// since the previous one started (zero for the first relist: not recorded).
func (m *AgentMetrics) ObserveRelist(duration, interval time.Duration) {
	m.PLEGRelistDuration.Observe(duration.Seconds())
	if interval > 0 {
		m.PLEGRelistInterval.Observe(interval.Seconds())
	}
}

// SetRunning sets the running pod count and the container counts by
// state; states not in containers are set to zero.
func (m *AgentMetrics) SetRunning(pods int, containers map[string]int) {
	m.RunningPods.Set(float64(pods))
	for _, st := range []string{"created", "running", "exited", "unknown"} {
		m.RunningContainers.WithLabelValues(st).Set(float64(containers[st]))
	}
	for st, n := range containers {
		m.RunningContainers.WithLabelValues(st).Set(float64(n))
	}
}

// IncEviction counts one eviction under signal (e.g. memory.available).
func (m *AgentMetrics) IncEviction(signal string) {
	m.Evictions.WithLabelValues(signal).Inc()
}

// ProbeMetrics are the prober's metrics, served on /metrics/probes as
// upstream.
type ProbeMetrics struct {
	// ProbeTotal: probe runs by probe_type (Liveness, Readiness, Startup),
	// result (successful, failed, unknown), container, pod, namespace,
	// pod_uid.
	ProbeTotal *prometheus.CounterVec
	// ProbeDuration: seconds per probe by probe_type, container, pod,
	// namespace.
	ProbeDuration *prometheus.HistogramVec
}

// RegisterProbeMetrics creates the prober's metrics and registers them
// with reg (give the same registry to Config.ProbeMetrics).
func RegisterProbeMetrics(reg prometheus.Registerer) (*ProbeMetrics, error) {
	m := &ProbeMetrics{
		ProbeTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProbeTotal,
			Help: "Cumulative number of a liveness, readiness or startup probe for a container by result.",
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		ProbeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricProbeDuration, Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
			Help: "Duration in seconds for a probe response.",
		}, []string{"probe_type", "container", "pod", "namespace"}),
	}
	for _, c := range []prometheus.Collector{m.ProbeTotal, m.ProbeDuration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register probe metrics: %w", err)
		}
	}
	return m, nil
}

// ObserveProbe records one probe run.
func (m *ProbeMetrics) ObserveProbe(probeType, result, namespace, pod, podUID, container string, d time.Duration) {
	m.ProbeTotal.WithLabelValues(probeType, result, container, pod, namespace, podUID).Inc()
	m.ProbeDuration.WithLabelValues(probeType, container, pod, namespace).Observe(d.Seconds())
}

// httpMetrics instrument the server itself.
type httpMetrics struct {
	requests *prometheus.CounterVec
	inflight *prometheus.GaugeVec
	duration *prometheus.HistogramVec
}

func registerHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	httpLabels := []string{"method", "path", "server_type", "long_running"}
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricHTTPRequests, Help: "Number of the http requests received since the server started",
		}, httpLabels),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricHTTPInflight, Help: "Number of the inflight http requests",
		}, httpLabels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricHTTPDuration, Help: "Duration in seconds to serve http requests",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, httpLabels),
	}
	for _, c := range []prometheus.Collector{m.requests, m.inflight, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register HTTP metrics: %w", err)
		}
	}
	return m, nil
}

// pathBucket is the first path element ("metrics/x" for metrics).
func pathBucket(path string) string {
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 3)
	b := parts[0]
	if b == "metrics" && len(parts) > 1 {
		b += "/" + parts[1]
	}
	switch b {
	case "healthz", "pods", "runningpods", "stats", "metrics", "metrics/resource", "metrics/probes",
		"containerLogs", "exec", "attach", "portForward", "configz", "checkpoint", "debug":
		return b
	}
	return "other"
}

// methodBucket keeps unknown methods out of the label set.
func methodBucket(m string) string {
	switch m {
	case "OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT":
		return m
	}
	return "other"
}

// instrument counts and times requests.
func (m *httpMetrics) instrument(clk clock.PassiveClock, serverType string, next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := methodBucket(r.Method)
		path := pathBucket(r.URL.Path)
		long := path == "exec" || path == "attach" || path == "portForward"
		labels := []string{method, path, serverType, strconv.FormatBool(long)}
		m.requests.WithLabelValues(labels...).Inc()
		g := m.inflight.WithLabelValues(labels...)
		g.Inc()
		start := clk.Now()
		defer func() {
			g.Dec()
			m.duration.WithLabelValues(labels...).Observe(clk.Since(start).Seconds())
		}()
		next.ServeHTTP(w, r)
	})
}

// gathererHandler serves a registry in the Prometheus text format.
func gathererHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
