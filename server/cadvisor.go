package server

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// ContainerMetrics supplies /metrics/cadvisor: the container_* and
// machine_* series (containermetrics.Collector satisfies it).
type ContainerMetrics interface {
	// Gatherer returns the series of one scrape; ctx is the request's
	// and bounds the runtime calls gathering makes.
	Gatherer(ctx context.Context) prometheus.Gatherer
}

// containerMetrics serves GET /metrics/cadvisor.
func (s *Server) containerMetrics(w http.ResponseWriter, r *http.Request) {
	if s.cfg.ContainerMetrics == nil {
		s.gatherer(nil).ServeHTTP(w, r)
		return
	}
	gathererHandler(s.cfg.ContainerMetrics.Gatherer(r.Context())).ServeHTTP(w, r)
}
