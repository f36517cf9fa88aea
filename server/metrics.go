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
	MetricPodWorkerDuration        = "kubelet_pod_worker_duration_seconds"
	MetricPodStartDuration         = "kubelet_pod_start_duration_seconds"
	MetricPodStartSLIDuration      = "kubelet_pod_start_sli_duration_seconds"
	MetricPLEGRelistDuration       = "kubelet_pleg_relist_duration_seconds"
	MetricPLEGRelistInterval       = "kubelet_pleg_relist_interval_seconds"
	MetricPLEGLastSeen             = "kubelet_pleg_last_seen_seconds"
	MetricRunningPods              = "kubelet_running_pods"
	MetricRunningContainers        = "kubelet_running_containers"
	MetricEvictions                = "kubelet_evictions"
	MetricRuntimeOperations        = "kubelet_runtime_operations_total"
	MetricRuntimeOperationsErrors  = "kubelet_runtime_operations_errors_total"
	MetricRuntimeOperationsSeconds = "kubelet_runtime_operations_duration_seconds"
	MetricStartedPods              = "kubelet_started_pods_total"
	MetricStartedPodsErrors        = "kubelet_started_pods_errors_total"
	MetricStartedContainers        = "kubelet_started_containers_total"
	MetricStartedContainersErrors  = "kubelet_started_containers_errors_total"
	MetricImagePullDuration        = "kubelet_image_pull_duration_seconds"
	MetricImageVolumeRequested     = "kubelet_image_volume_requested_total"
	MetricImageVolumeMounted       = "kubelet_image_volume_mounted_succeed_total"
	MetricImageVolumeMountErrors   = "kubelet_image_volume_mounted_errors_total"
	MetricCgroupManagerDuration    = "kubelet_cgroup_manager_duration_seconds"
	MetricNodeName                 = "kubelet_node_name"
	MetricProbeTotal               = "prober_probe_total"
	MetricProbeDuration            = "prober_probe_duration_seconds"
	MetricHTTPRequests             = "kubelet_http_requests_total"
	MetricHTTPInflight             = "kubelet_http_inflight_requests"
	MetricHTTPDuration             = "kubelet_http_requests_duration_seconds"
)

// alpha and beta prefix help texts as upstream's component-base does for
// metrics of those stability levels, so a scrape reads the same.
func alpha(help string) string { return "[ALPHA] " + help }
func beta(help string) string  { return "[BETA] " + help }

// Upstream's buckets (pkg/kubelet/metrics v1.37).
var (
	podStartBuckets  = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
	imagePullBuckets = []float64{1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
	runtimeBuckets   = prometheus.ExponentialBuckets(.005, 2.5, 14)
)

// AgentMetrics are the node agent's own metrics. The packages that produce
// the numbers do not import this one: they declare the one or two methods
// they call (syncloop.Metrics, pleg.Metrics, criruntime.Metrics,
// eviction.Metrics), and the agent's wiring hands them this value.
type AgentMetrics struct {
	// PodWorkerDuration: seconds to sync one pod, by operation_type
	// (create, update, sync, kill, terminated).
	PodWorkerDuration *prometheus.HistogramVec
	// PodStartDuration: seconds from the agent first seeing a pod to its
	// first Running status.
	PodStartDuration prometheus.Histogram
	// PodStartSLIDuration: seconds from a pod's creation to its first
	// Running status, less the time spent pulling its images.
	PodStartSLIDuration *prometheus.HistogramVec
	// PLEGRelistDuration: seconds one relist took.
	PLEGRelistDuration prometheus.Histogram
	// PLEGRelistInterval: seconds between the starts of two relists.
	PLEGRelistInterval prometheus.Histogram
	// PLEGLastSeen: Unix time of the last successful relist.
	PLEGLastSeen prometheus.Gauge
	// RunningPods: pods with a running sandbox.
	RunningPods prometheus.Gauge
	// RunningContainers: containers by container_state (created,
	// running, exited, unknown).
	RunningContainers *prometheus.GaugeVec
	// Evictions: pods evicted, by eviction_signal.
	Evictions *prometheus.CounterVec
	// RuntimeOperations, RuntimeOperationsErrors, RuntimeOperationsDuration:
	// CRI calls by operation_type (upstream's names: run_podsandbox,
	// create_container, list_containers, pull_image, ...).
	RuntimeOperations         *prometheus.CounterVec
	RuntimeOperationsErrors   *prometheus.CounterVec
	RuntimeOperationsDuration *prometheus.HistogramVec
	// StartedPods, StartedPodsErrors: sandboxes the agent tried to run,
	// and the tries that failed.
	StartedPods       prometheus.Counter
	StartedPodsErrors prometheus.Counter
	// StartedContainers: containers the agent tried to start, by
	// container_type (container, init_container, ephemeral_container);
	// StartedContainersErrors adds code, the failure's reason
	// (CreateContainerError, RunContainerError, ...).
	StartedContainers       *prometheus.CounterVec
	StartedContainersErrors *prometheus.CounterVec
	// ImagePullDuration: seconds per successful pull, waiting for a turn
	// included, by image_size_in_bytes (a size bucket such as
	// "10MB-100MB").
	ImagePullDuration *prometheus.HistogramVec
	// ImageVolumeRequested, ImageVolumeMounted, ImageVolumeMountErrors:
	// image volumes asked for by container starts, and their mounts that
	// succeeded or failed (ImageVolumeMounts).
	ImageVolumeRequested   prometheus.Counter
	ImageVolumeMounted     prometheus.Counter
	ImageVolumeMountErrors prometheus.Counter
	// CgroupManagerDuration: seconds per pod or QoS cgroup operation, by
	// operation_type (create, update, destroy).
	CgroupManagerDuration *prometheus.HistogramVec
	// NodeName: 1, labelled with the node's name (SetNodeName).
	NodeName *prometheus.GaugeVec
	// Node start-up phases (SetNodeStartup).
	NodeStartup *NodeStartupGauges

	pulls *pullTracker // image pull periods per pod, for the SLI
}

// RegisterAgentMetrics creates the agent's metrics and registers them with
// reg (for example a prometheus.NewRegistry() also given to Config.Metrics).
// It fails if any is already registered there.
func RegisterAgentMetrics(reg prometheus.Registerer) (*AgentMetrics, error) {
	m := &AgentMetrics{NodeStartup: newNodeStartupGauges(), pulls: newPullTracker()}
	m.initPodMetrics()
	m.initRuntimeMetrics()
	m.initImageMetrics()
	m.initNodeMetrics()
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register agent metrics: %w", err)
		}
	}
	return m, nil
}

// initPodMetrics creates the pod worker, pod start, PLEG, running and
// eviction series.
func (m *AgentMetrics) initPodMetrics() {
	m.PodWorkerDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricPodWorkerDuration, Buckets: prometheus.DefBuckets,
		Help: alpha("Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync"),
	}, []string{"operation_type"})
	m.PodStartDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: MetricPodStartDuration, Buckets: podStartBuckets,
		Help: alpha("Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run"),
	})
	m.PodStartSLIDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricPodStartSLIDuration, Buckets: podStartBuckets,
		Help: alpha("Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch"),
	}, []string{})
	m.PLEGRelistDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: MetricPLEGRelistDuration, Buckets: prometheus.DefBuckets,
		Help: alpha("Duration in seconds for relisting pods in PLEG."),
	})
	m.PLEGRelistInterval = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: MetricPLEGRelistInterval, Buckets: prometheus.DefBuckets,
		Help: alpha("Interval in seconds between relisting in PLEG."),
	})
	m.PLEGLastSeen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricPLEGLastSeen, Help: alpha("Timestamp in seconds when PLEG was last seen active."),
	})
	m.RunningPods = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricRunningPods, Help: alpha("Number of pods that have a running pod sandbox"),
	})
	m.RunningContainers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricRunningContainers, Help: alpha("Number of containers currently running"),
	}, []string{"container_state"})
	m.Evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricEvictions, Help: alpha("Cumulative number of pod evictions by eviction signal"),
	}, []string{"eviction_signal"})
}

// initRuntimeMetrics creates the runtime operation and started pod and
// container series.
func (m *AgentMetrics) initRuntimeMetrics() {
	m.RuntimeOperations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricRuntimeOperations, Help: alpha("Cumulative number of runtime operations by operation type."),
	}, []string{"operation_type"})
	m.RuntimeOperationsErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricRuntimeOperationsErrors, Help: alpha("Cumulative number of runtime operation errors by operation type."),
	}, []string{"operation_type"})
	m.RuntimeOperationsDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricRuntimeOperationsSeconds, Buckets: runtimeBuckets,
		Help: alpha("Duration in seconds of runtime operations. Broken down by operation type."),
	}, []string{"operation_type"})
	m.StartedPods = prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricStartedPods, Help: alpha("Cumulative number of pods started"),
	})
	m.StartedPodsErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricStartedPodsErrors, Help: alpha("Cumulative number of errors when starting pods"),
	})
	m.StartedContainers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricStartedContainers, Help: alpha("Cumulative number of containers started"),
	}, []string{"container_type"})
	m.StartedContainersErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricStartedContainersErrors, Help: alpha("Cumulative number of errors when starting containers"),
	}, []string{"container_type", "code"})
}

// initImageMetrics creates the image pull and image volume series.
func (m *AgentMetrics) initImageMetrics() {
	m.ImagePullDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricImagePullDuration, Buckets: imagePullBuckets,
		Help: alpha("Duration in seconds to pull an image."),
	}, []string{"image_size_in_bytes"})
	m.ImageVolumeRequested = prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricImageVolumeRequested, Help: beta("Number of requested image volumes."),
	})
	m.ImageVolumeMounted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricImageVolumeMounted, Help: beta("Number of successful image volume mounts."),
	})
	m.ImageVolumeMountErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricImageVolumeMountErrors, Help: beta("Number of failed image volume mounts."),
	})
}

// initNodeMetrics creates the cgroup manager and node name series.
func (m *AgentMetrics) initNodeMetrics() {
	m.CgroupManagerDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricCgroupManagerDuration, Buckets: prometheus.DefBuckets,
		Help: alpha("Duration in seconds for cgroup manager operations. Broken down by method."),
	}, []string{"operation_type"})
	m.NodeName = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricNodeName, Help: alpha("The node's name. The count is always 1."),
	}, []string{"node"})
}

// collectors lists every series of m in the order they are registered.
func (m *AgentMetrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.PodWorkerDuration, m.PodStartDuration, m.PodStartSLIDuration,
		m.PLEGRelistDuration, m.PLEGRelistInterval, m.PLEGLastSeen, m.RunningPods, m.RunningContainers, m.Evictions,
		m.RuntimeOperations, m.RuntimeOperationsErrors, m.RuntimeOperationsDuration,
		m.StartedPods, m.StartedPodsErrors, m.StartedContainers, m.StartedContainersErrors,
		m.ImagePullDuration, m.ImageVolumeRequested, m.ImageVolumeMounted, m.ImageVolumeMountErrors, m.CgroupManagerDuration, m.NodeName}
	return append(cs, m.NodeStartup.collectors()...)
}

// ObservePodWorker records one pod sync of the given operation type.
func (m *AgentMetrics) ObservePodWorker(operation string, d time.Duration) {
	m.PodWorkerDuration.WithLabelValues(operation).Observe(d.Seconds())
}

// ObserveCgroupOperation records one cgroup operation (cgroupmgr's
// OperationObserver).
func (m *AgentMetrics) ObserveCgroupOperation(op string, d time.Duration) {
	m.CgroupManagerDuration.WithLabelValues(op).Observe(d.Seconds())
}

// ObserveRelist records one PLEG relist: how long it took and the time
// since the previous one started (zero for the first relist: not recorded).
func (m *AgentMetrics) ObserveRelist(duration, interval time.Duration) {
	m.PLEGRelistDuration.Observe(duration.Seconds())
	if interval > 0 {
		m.PLEGRelistInterval.Observe(interval.Seconds())
	}
}

// SetPLEGLastSeen records when the PLEG last relisted successfully (alerts
// use time() - kubelet_pleg_last_seen_seconds).
func (m *AgentMetrics) SetPLEGLastSeen(t time.Time) {
	m.PLEGLastSeen.Set(float64(t.Unix()))
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

// ObserveRuntimeOperation records one CRI call: operation is upstream's
// operation_type (e.g. "create_container"), err its outcome.
func (m *AgentMetrics) ObserveRuntimeOperation(operation string, d time.Duration, err error) {
	m.RuntimeOperations.WithLabelValues(operation).Inc()
	m.RuntimeOperationsDuration.WithLabelValues(operation).Observe(d.Seconds())
	if err != nil {
		m.RuntimeOperationsErrors.WithLabelValues(operation).Inc()
	}
}

// StartedPod counts one attempt to run a pod sandbox; a non-nil err
// counts it as failed too.
func (m *AgentMetrics) StartedPod(err error) {
	m.StartedPods.Inc()
	if err != nil {
		m.StartedPodsErrors.Inc()
	}
}

// StartedContainer counts one attempt to start a container of
// containerType ("container", "init_container", "ephemeral_container");
// a non-empty failure (its reason, e.g. "CreateContainerError") counts it
// as failed too.
func (m *AgentMetrics) StartedContainer(containerType, failure string) {
	m.StartedContainers.WithLabelValues(containerType).Inc()
	if failure != "" {
		m.StartedContainersErrors.WithLabelValues(containerType, failure).Inc()
	}
}

// ImageVolumeMounts records the image volumes of one container start
// (criruntime.ImageVolumeMetrics).
func (m *AgentMetrics) ImageVolumeMounts(requested, succeeded, failed int) {
	m.ImageVolumeRequested.Add(float64(requested))
	m.ImageVolumeMounted.Add(float64(succeeded))
	m.ImageVolumeMountErrors.Add(float64(failed))
}

// SetNodeName sets kubelet_node_name{node=name} to 1.
func (m *AgentMetrics) SetNodeName(name string) {
	m.NodeName.WithLabelValues(name).Set(1)
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
			Help: alpha("Cumulative number of a liveness, readiness or startup probe for a container by result."),
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		ProbeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricProbeDuration, Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
			Help: alpha("Duration in seconds for a probe response."),
		}, []string{"probe_type", "container", "pod", "namespace"}),
	}
	for _, c := range []prometheus.Collector{m.ProbeTotal, m.ProbeDuration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register probe metrics: %w", err)
		}
	}
	return m, nil
}

// ObserveProbe records one probe run. As upstream, the duration of a
// failed probe is not observed (a timeout would skew it).
func (m *ProbeMetrics) ObserveProbe(probeType, result, namespace, pod, podUID, container string, d time.Duration) {
	m.ProbeTotal.WithLabelValues(probeType, result, container, pod, namespace, podUID).Inc()
	if result != "failed" {
		m.ProbeDuration.WithLabelValues(probeType, container, pod, namespace).Observe(d.Seconds())
	}
}

// ForgetProbe deletes the series of a probe whose worker stopped, as
// upstream, so departed pods do not linger on /metrics/probes.
func (m *ProbeMetrics) ForgetProbe(probeType, namespace, pod, podUID, container string) {
	for _, r := range []string{"successful", "failed", "unknown"} {
		m.ProbeTotal.DeleteLabelValues(probeType, r, container, pod, namespace, podUID)
	}
	m.ProbeDuration.DeleteLabelValues(probeType, container, pod, namespace)
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
			Name: MetricHTTPRequests, Help: alpha("Number of the http requests received since the server started"),
		}, httpLabels),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricHTTPInflight, Help: alpha("Number of the inflight http requests"),
		}, httpLabels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricHTTPDuration, Help: alpha("Duration in seconds to serve http requests"),
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
	case "healthz", "pods", "runningpods", "stats", "metrics", "metrics/resource", "metrics/probes", "metrics/cadvisor",
		"containerLogs", "exec", "attach", "portForward", "configz", "checkpoint", "debug", "statusz", "flagz", "logs", "run":
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
