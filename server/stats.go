package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// StatsProvider supplies the Summary API (node, pod and container
// statistics) for /stats/summary and /metrics/resource.
type StatsProvider interface {
	// Summary returns the current statistics; with onlyCPUAndMemory it may
	// leave out everything but CPU and memory (cheaper). It may block on
	// the runtime or the machine. The result belongs to the caller.
	Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error)
}

// StatsProviderFunc adapts a function to StatsProvider.
type StatsProviderFunc func(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error)

// Summary calls f.
func (f StatsProviderFunc) Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error) {
	return f(ctx, onlyCPUAndMemory)
}

const noStatsMessage = "node statistics are not available: the node agent runs no stats provider"

// statsSummary serves GET and POST /stats/summary[?only_cpu_and_memory=true].
func (s *Server) statsSummary(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Stats == nil {
		http.Error(w, noStatsMessage, http.StatusServiceUnavailable)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "parse form failed: "+err.Error(), http.StatusBadRequest)
		return
	}
	only := false
	if v, ok := r.Form["only_cpu_and_memory"]; ok && len(v) == 1 && v[0] == "true" {
		only = true
	}
	sum, err := s.cfg.Stats.Summary(r.Context(), only)
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Unable to get the stats summary")
		http.Error(w, "Internal Error: "+err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, r, sum)
}

// Resource metrics, as upstream's /metrics/resource.
var (
	descNodeCPU = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	descNodeMemory = prometheus.NewDesc("node_memory_working_set_bytes",
		"Current working set of the node in bytes", nil, nil)
	descNodeSwap = prometheus.NewDesc("node_swap_usage_bytes",
		"Current swap usage of the node in bytes. Reported only on non-windows systems", nil, nil)
	descContainerStart = prometheus.NewDesc("container_start_time_seconds",
		"Start time of the container since unix epoch in seconds", []string{"container", "pod", "namespace"}, nil)
	descContainerCPU = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil)
	descContainerMemory = prometheus.NewDesc("container_memory_working_set_bytes",
		"Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil)
	descContainerSwap = prometheus.NewDesc("container_swap_usage_bytes",
		"Current amount of the container swap usage in bytes. Reported only on non-windows systems", []string{"container", "pod", "namespace"}, nil)
	descPodCPU = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil)
	descPodMemory = prometheus.NewDesc("pod_memory_working_set_bytes",
		"Current working set of the pod in bytes", []string{"pod", "namespace"}, nil)
	descPodSwap = prometheus.NewDesc("pod_swap_usage_bytes",
		"Current amount of the pod swap usage in bytes. Reported only on non-windows systems", []string{"pod", "namespace"}, nil)
	descScrapeError = prometheus.NewDesc("resource_scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// resourceCollector turns one Summary, read before the scrape, into the
// resource metrics.
type resourceCollector struct {
	sum *statsapi.Summary
	err error
}

func (c resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNodeCPU, descNodeMemory, descNodeSwap, descContainerStart, descContainerCPU,
		descContainerMemory, descContainerSwap, descPodCPU, descPodMemory, descPodSwap, descScrapeError} {
		ch <- d
	}
}

func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.err != nil || c.sum == nil {
		ch <- prometheus.MustNewConstMetric(descScrapeError, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(descScrapeError, prometheus.GaugeValue, 0)
	emit := func(d *prometheus.Desc, t prometheus.ValueType, at time.Time, v float64, labels ...string) {
		m := prometheus.MustNewConstMetric(d, t, v, labels...)
		if !at.IsZero() {
			m = prometheus.NewMetricWithTimestamp(at, m)
		}
		ch <- m
	}
	n := c.sum.Node
	if n.CPU != nil && n.CPU.UsageCoreNanoSeconds != nil {
		emit(descNodeCPU, prometheus.CounterValue, n.CPU.Time.Time, float64(*n.CPU.UsageCoreNanoSeconds)/1e9)
	}
	if n.Memory != nil && n.Memory.WorkingSetBytes != nil {
		emit(descNodeMemory, prometheus.GaugeValue, n.Memory.Time.Time, float64(*n.Memory.WorkingSetBytes))
	}
	if n.Swap != nil && n.Swap.SwapUsageBytes != nil {
		emit(descNodeSwap, prometheus.GaugeValue, n.Swap.Time.Time, float64(*n.Swap.SwapUsageBytes))
	}
	for _, p := range c.sum.Pods {
		name, ns := p.PodRef.Name, p.PodRef.Namespace
		for _, ct := range p.Containers {
			if ct.StartTime.Unix() > 0 {
				emit(descContainerStart, prometheus.GaugeValue, time.Time{}, float64(ct.StartTime.UnixNano())/1e9, ct.Name, name, ns)
			}
			if ct.CPU != nil && ct.CPU.UsageCoreNanoSeconds != nil {
				emit(descContainerCPU, prometheus.CounterValue, ct.CPU.Time.Time, float64(*ct.CPU.UsageCoreNanoSeconds)/1e9, ct.Name, name, ns)
			}
			if ct.Memory != nil && ct.Memory.WorkingSetBytes != nil {
				emit(descContainerMemory, prometheus.GaugeValue, ct.Memory.Time.Time, float64(*ct.Memory.WorkingSetBytes), ct.Name, name, ns)
			}
			if ct.Swap != nil && ct.Swap.SwapUsageBytes != nil {
				emit(descContainerSwap, prometheus.GaugeValue, ct.Swap.Time.Time, float64(*ct.Swap.SwapUsageBytes), ct.Name, name, ns)
			}
		}
		if p.CPU != nil && p.CPU.UsageCoreNanoSeconds != nil {
			emit(descPodCPU, prometheus.CounterValue, p.CPU.Time.Time, float64(*p.CPU.UsageCoreNanoSeconds)/1e9, name, ns)
		}
		if p.Memory != nil && p.Memory.WorkingSetBytes != nil {
			emit(descPodMemory, prometheus.GaugeValue, p.Memory.Time.Time, float64(*p.Memory.WorkingSetBytes), name, ns)
		}
		if p.Swap != nil && p.Swap.SwapUsageBytes != nil {
			emit(descPodSwap, prometheus.GaugeValue, p.Swap.Time.Time, float64(*p.Swap.SwapUsageBytes), name, ns)
		}
	}
}

// resourceMetrics serves GET /metrics/resource.
func (s *Server) resourceMetrics(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Stats == nil {
		http.Error(w, noStatsMessage, http.StatusServiceUnavailable)
		return
	}
	sum, err := s.cfg.Stats.Summary(r.Context(), true)
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Unable to get the stats summary for resource metrics")
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(resourceCollector{sum: sum, err: err}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	gathererHandler(reg).ServeHTTP(w, r)
}
