package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/klog/v2"
)

// HealthCheck is one named check of /healthz, e.g. "syncloop" (the sync
// loop is not stuck on an unhealthy runtime) or "pleg" (the PLEG relisted
// recently). Check must be quick and safe for concurrent use; a non-nil
// error fails /healthz with 500.
type HealthCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// NamedCheck makes a HealthCheck from a method such as loop.Healthy.
func NamedCheck(name string, healthy func() error) HealthCheck {
	return HealthCheck{Name: name, Check: func(context.Context) error { return healthy() }}
}

// pingCheck always passes: the server answers.
var pingCheck = HealthCheck{Name: "ping", Check: func(context.Context) error { return nil }}

// healthz serves /healthz (every check; ?verbose lists them; ?exclude=NAME
// skips one) and /healthz/NAME (one check), as upstream: "ok" with 200, or
// the failing checks (reasons withheld; they are logged) with 500.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	checks := s.checks
	if name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/healthz"), "/"); name != "" {
		var one []HealthCheck
		for _, c := range checks {
			if c.Name == name {
				one = append(one, c)
			}
		}
		if len(one) == 0 {
			http.NotFound(w, r)
			return
		}
		checks = one
	}
	excluded := map[string]bool{}
	for _, e := range r.URL.Query()["exclude"] {
		excluded[e] = true
	}
	var b strings.Builder
	failed := false
	for _, c := range checks {
		if excluded[c.Name] {
			fmt.Fprintf(&b, "[+]%s excluded: ok\n", c.Name)
			continue
		}
		if err := c.Check(r.Context()); err != nil {
			klog.FromContext(r.Context()).V(2).Info("Health check failed", "check", c.Name, "err", err)
			fmt.Fprintf(&b, "[-]%s failed: reason withheld\n", c.Name)
			failed = true
			continue
		}
		fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if failed {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "%shealthz check failed\n", b.String())
		return
	}
	if _, verbose := r.URL.Query()["verbose"]; verbose {
		fmt.Fprintf(w, "%shealthz check passed\n", b.String())
		return
	}
	fmt.Fprint(w, "ok")
}
