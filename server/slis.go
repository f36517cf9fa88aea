package server

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

// sliMetrics are component-base's healthz SLIs, served on /metrics/slis
// from a registry of the server's own: the result of each /healthz check
// (kubernetes_healthcheck) and their count (kubernetes_healthchecks_total),
// recorded each time /healthz runs its checks, with the process start
// time. DELETE /metrics/slis resets the checks, as upstream.
type sliMetrics struct {
	reg     *prometheus.Registry
	current *prometheus.GaugeVec
	total   *prometheus.CounterVec
}

func stable(help string) string { return "[STABLE] " + help }

func newSLIMetrics() (*sliMetrics, error) {
	m := &sliMetrics{
		reg: prometheus.NewRegistry(),
		current: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kubernetes_healthcheck", Help: stable("This metric records the result of a single healthcheck."),
		}, []string{"name", "type"}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubernetes_healthchecks_total", Help: stable("This metric records the results of all healthcheck."),
		}, []string{"name", "type", "status"}),
	}
	start := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "process_start_time_seconds", Help: alpha("Start time of the process since unix epoch in seconds."),
	}, []string{})
	if p, err := procfs.Self(); err == nil {
		if st, err := p.Stat(); err == nil {
			if t, err := st.StartTime(); err == nil {
				start.WithLabelValues().Set(t)
			}
		}
	}
	for _, c := range []prometheus.Collector{m.current, m.total, start} {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register SLI metrics: %w", err)
		}
	}
	return m, nil
}

// observe records one check of /healthz ("healthz" is its type).
func (m *sliMetrics) observe(check string, err error) {
	if m == nil {
		return
	}
	status, v := "success", 1.0
	if err != nil {
		status, v = "error", 0
	}
	m.current.WithLabelValues(check, "healthz").Set(v)
	m.total.WithLabelValues(check, "healthz", status).Inc()
}

// ServeHTTP serves the SLIs (GET) or resets the checks (DELETE).
func (m *sliMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodDelete {
		m.current.Reset()
		m.total.Reset()
		fmt.Fprint(w, "metrics reset\n")
		return
	}
	gathererHandler(m.reg).ServeHTTP(w, r)
}
