package server

import (
	"crypto/tls"
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// csrMetrics are upstream kubelet's serving-certificate series, kept by a
// CSRCertificate registered with CSRConfig.Metrics.
type csrMetrics struct {
	renewErrors prometheus.Counter   // kubelet_server_expiration_renew_errors
	rotationAge prometheus.Histogram // kubelet_certificate_manager_server_rotation_seconds
}

// certificateAgeBuckets are upstream's buckets of the rotation histograms:
// a minute, an hour, 4 hours, a day, a week, a month, 3 and 6 months, a
// year, 4 years.
var certificateAgeBuckets = []float64{60, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000}

// registerCSRMetrics registers the serving-certificate series in reg:
// renewal errors, the age of certificates replaced, and the TTL of
// current's certificate read at each scrape (+Inf while there is none).
func registerCSRMetrics(reg prometheus.Registerer, current func() *tls.Certificate, clk clock.PassiveClock) (*csrMetrics, error) {
	m := &csrMetrics{
		renewErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kubelet_server_expiration_renew_errors",
			Help: alpha("Counter of certificate renewal errors."),
		}),
		rotationAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubelet_certificate_manager_server_rotation_seconds",
			Help:    alpha("Histogram of the number of seconds the previous certificate lived before being rotated."),
			Buckets: certificateAgeBuckets,
		}),
	}
	ttl := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kubelet_certificate_manager_server_ttl_seconds",
		Help: alpha("Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. " +
			"The value is in seconds until certificate expiry (negative if already expired). " +
			"If serving certificate is invalid or unused, the value will be +INF."),
	}, func() float64 {
		if c := current(); c != nil && c.Leaf != nil {
			return math.Trunc(c.Leaf.NotAfter.Sub(clk.Now()).Seconds())
		}
		return math.Inf(1)
	})
	for _, c := range []prometheus.Collector{m.renewErrors, m.rotationAge, ttl} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register serving certificate metrics: %w", err)
		}
	}
	return m, nil
}
