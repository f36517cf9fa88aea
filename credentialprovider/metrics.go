package credentialprovider

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are kubelet's credential provider plugin metrics
// (pkg/credentialprovider/plugin/metrics.go), with upstream's names,
// labels, buckets and help. They exist from Load on and move whether or
// not they are registered (RegisterMetrics).
type metrics struct {
	errors     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	configInfo *prometheus.GaugeVec
}

func newMetrics(configHash string) *metrics {
	m := &metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kubelet", Name: "credential_provider_plugin_errors_total",
			Help: "[ALPHA] Number of errors from credential provider plugin"}, []string{"plugin_name"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "kubelet", Name: "credential_provider_plugin_duration",
			Help: "[ALPHA] Duration of execution in seconds for credential provider plugin", Buckets: prometheus.DefBuckets},
			[]string{"plugin_name"}),
		configInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "kubelet", Name: "credential_provider_config_info",
			Help: "[ALPHA] Information about the last applied credential provider configuration with hash as label"}, []string{"hash"}),
	}
	m.configInfo.WithLabelValues(configHash).Set(1)
	return m
}

// observe records one run of a provider's binary: its duration in
// seconds and, when the run failed (it could not start, exited non-zero,
// or its deadline passed), an error. A response that does not decode is
// no plugin error, as upstream counts only the exec.
func (m *metrics) observe(plugin string, seconds float64, failed bool) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(plugin).Observe(seconds)
	if failed {
		m.errors.WithLabelValues(plugin).Inc()
	}
}

// RegisterMetrics registers kubelet's credential provider plugin metrics
// with reg, as kubelet does once it has loaded the providers:
// kubelet_credential_provider_plugin_errors_total{plugin_name} and
// kubelet_credential_provider_plugin_duration{plugin_name} (seconds,
// Prometheus' default buckets), updated on every run of a provider's
// binary, and kubelet_credential_provider_config_info{hash} (1, the hash
// of the configuration Load read; see ConfigHash).
func (k *Keyring) RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{k.metrics.errors, k.metrics.duration, k.metrics.configInfo} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ConfigHash is the hash of the configuration Load read, as kubelet
// computes it: "sha256:" and the hex SHA-256 of every file, in the order
// read, each as its length (8 bytes, big-endian) then its content.
func (k *Keyring) ConfigHash() string {
	return k.configHash
}
