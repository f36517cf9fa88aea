package server

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// Buckets of client-go's request metrics as component-base defines them.
var (
	restLatencyBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0}
	restSizeBuckets    = []float64{64, 256, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216}
)

// RESTClientMetrics are the rest_client_* series the kubernetes-mixin reads
// from a kubelet (request rate and errors by code, latency by verb),
// registered on a registry of the caller's. client-go reports them through
// a process-wide hook; see RESTClientHook.
type RESTClientMetrics struct {
	latency, rateLimiter  *prometheus.HistogramVec
	requestSize, respSize *prometheus.HistogramVec
	results, retries      *prometheus.CounterVec
}

// RegisterRESTClientMetrics registers the rest_client_* request metrics on
// reg with upstream's names, labels and buckets.
func RegisterRESTClientMetrics(reg prometheus.Registerer) (*RESTClientMetrics, error) {
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: alpha(help), Buckets: buckets}, []string{"verb", "host"})
	}
	m := &RESTClientMetrics{
		latency:     hist("rest_client_request_duration_seconds", "Request latency in seconds. Broken down by verb, and host.", restLatencyBuckets),
		rateLimiter: hist("rest_client_rate_limiter_duration_seconds", "Client side rate limiter latency in seconds. Broken down by verb, and host.", restLatencyBuckets),
		requestSize: hist("rest_client_request_size_bytes", "Request size in bytes. Broken down by verb and host.", restSizeBuckets),
		respSize:    hist("rest_client_response_size_bytes", "Response size in bytes. Broken down by verb and host.", restSizeBuckets),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
			Help: alpha("Number of HTTP requests, partitioned by status code, method, and host.")}, []string{"code", "method", "host"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_request_retries_total",
			Help: alpha("Number of request retries, partitioned by status code, verb, and host.")}, []string{"code", "verb", "host"}),
	}
	for _, c := range []prometheus.Collector{m.latency, m.rateLimiter, m.requestSize, m.respSize, m.results, m.retries} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register rest client metrics: %w", err)
		}
	}
	return m, nil
}

// RESTClientHook is what client-go's process-wide metrics hook reports
// into: the RESTClientMetrics attached last (an agent attaches its own when
// it starts; nothing is counted while none is attached). The process's main
// makes one and hands Opts to k8s.io/client-go/tools/metrics.Register once,
// before it builds its first client.
type RESTClientHook struct {
	cur atomic.Pointer[RESTClientMetrics]
}

// Attach makes m the metrics the hook reports into.
func (h *RESTClientHook) Attach(m *RESTClientMetrics) { h.cur.Store(m) }

// Opts is what client-go's metrics.Register takes to report into h.
func (h *RESTClientHook) Opts() clientmetrics.RegisterOpts {
	pick := func(f func(*RESTClientMetrics) *prometheus.HistogramVec) func() *prometheus.HistogramVec {
		return func() *prometheus.HistogramVec {
			if m := h.cur.Load(); m != nil {
				return f(m)
			}
			return nil
		}
	}
	counter := func(f func(*RESTClientMetrics) *prometheus.CounterVec) func() *prometheus.CounterVec {
		return func() *prometheus.CounterVec {
			if m := h.cur.Load(); m != nil {
				return f(m)
			}
			return nil
		}
	}
	return clientmetrics.RegisterOpts{
		RequestLatency:     latencyAdapter(pick(func(m *RESTClientMetrics) *prometheus.HistogramVec { return m.latency })),
		RateLimiterLatency: latencyAdapter(pick(func(m *RESTClientMetrics) *prometheus.HistogramVec { return m.rateLimiter })),
		RequestSize:        sizeAdapter(pick(func(m *RESTClientMetrics) *prometheus.HistogramVec { return m.requestSize })),
		ResponseSize:       sizeAdapter(pick(func(m *RESTClientMetrics) *prometheus.HistogramVec { return m.respSize })),
		RequestResult:      resultAdapter(counter(func(m *RESTClientMetrics) *prometheus.CounterVec { return m.results })),
		RequestRetry:       retryAdapter(counter(func(m *RESTClientMetrics) *prometheus.CounterVec { return m.retries })),
	}
}

type latencyAdapter func() *prometheus.HistogramVec

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	if h := a(); h != nil {
		h.WithLabelValues(verb, u.Host).Observe(d.Seconds())
	}
}

type sizeAdapter func() *prometheus.HistogramVec

func (a sizeAdapter) Observe(_ context.Context, verb, host string, size float64) {
	if h := a(); h != nil {
		h.WithLabelValues(verb, host).Observe(size)
	}
}

type resultAdapter func() *prometheus.CounterVec

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	if c := a(); c != nil {
		c.WithLabelValues(code, method, host).Inc()
	}
}

type retryAdapter func() *prometheus.CounterVec

func (a retryAdapter) IncrementRetry(_ context.Context, code, method, host string) {
	if c := a(); c != nil {
		c.WithLabelValues(code, method, host).Inc()
	}
}
