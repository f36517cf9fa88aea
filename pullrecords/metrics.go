package pullrecords

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The results MustPull counts under kubelet_imagemanager_image_mustpull_checks_total,
// as kubelet names them.
const (
	resultPolicyAllowed    = "credentialPolicyAllowed"
	resultRecordFound      = "credentialRecordFound"
	resultMustAuthenticate = "mustAuthenticate"
	resultError            = "error"
)

// metrics are kubelet's kubelet_imagemanager_* family. They exist from New
// on and move whether or not they are registered (RegisterMetrics).
type metrics struct {
	ondiskIntents, ondiskRecords prometheus.Gauge
	memIntents, memRecords       prometheus.Gauge
	checks                       *prometheus.CounterVec
}

func newMetrics() *metrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "kubelet", Name: name, Help: "[ALPHA] " + help})
	}
	return &metrics{
		ondiskIntents: gauge("imagemanager_ondisk_pullintents", "Number of ImagePullIntents stored on disk."),
		ondiskRecords: gauge("imagemanager_ondisk_pulledrecords", "Number of ImagePulledRecords stored on disk."),
		memIntents:    gauge("imagemanager_inmemory_pullintents_usage_percent", "The ImagePullIntents in-memory cache usage in percent."),
		memRecords:    gauge("imagemanager_inmemory_pulledrecords_usage_percent", "The ImagePulledRecords in-memory cache usage in percent."),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kubelet", Name: "imagemanager_image_mustpull_checks_total",
			Help: "[ALPHA] Counter for how many times kubelet checked whether credentials need to be re-verified to access an image"},
			[]string{"result"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ondiskIntents, m.ondiskRecords, m.memIntents, m.memRecords, m.checks}
}

// RegisterMetrics registers kubelet's image pull record metrics with reg:
// kubelet_imagemanager_ondisk_pullintents and _ondisk_pulledrecords (the
// files under ROOT/image_manager, counted after each write and removal),
// _inmemory_pullintents_usage_percent and
// _inmemory_pulledrecords_usage_percent (how full the in-memory caches
// are), and _image_mustpull_checks_total{result} (each MustPull of a
// present image: credentialPolicyAllowed, credentialRecordFound,
// mustAuthenticate or error).
func (v *Verifier) RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range v.metrics.collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
