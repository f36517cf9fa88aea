package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
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

// healthzHandler serves /healthz (every check; ?verbose lists them;
// ?exclude=NAME skips one) and /healthz/NAME (one check), as upstream: "ok"
// with 200, or the failing checks (reasons withheld; they are logged) with
// 500.
type healthzHandler struct {
	checks []HealthCheck
	// slis, if set, records the checks of /healthz (not of /healthz/NAME).
	slis *sliMetrics
}

func (h healthzHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	checks, slis := h.checks, h.slis
	if name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/healthz"), "/"); name != "" {
		slis = nil
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
		err := c.Check(r.Context())
		slis.observe(c.Name, err)
		if err != nil {
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

// DefaultHealthzPort and DefaultHealthzAddress are where upstream kubelet
// serves its local health endpoint (healthzPort, healthzBindAddress).
const (
	DefaultHealthzPort    = 10248
	DefaultHealthzAddress = "127.0.0.1"
	// healthzRetry is how long HealthzServer waits before listening again
	// after the address could not be taken, as upstream.
	healthzRetry = 5 * time.Second
)

// HealthzServer is the node agent's local health endpoint, upstream's
// healthzBindAddress:healthzPort (127.0.0.1:10248): /healthz and
// /healthz/NAME over plain HTTP, without authentication, answering "ok".
// Upstream runs only the "ping" check there (the sync loop's health is on
// the secure port's /healthz); Checks adds more. Tools such as kubeadm
// poll it to see that the agent is up.
type HealthzServer struct {
	// Address is the host to listen on ("" means every address) and Port
	// the port (required; upstream's healthzPort 0 means no server: do not
	// run one).
	Address string
	Port    int
	// Checks are added after "ping".
	Checks []HealthCheck
	// Clock times the retries. Default the real clock.
	Clock clock.Clock
}

// Handler serves /healthz with ping and the Checks.
func (h *HealthzServer) Handler() http.Handler {
	mux := http.NewServeMux()
	hh := healthzHandler{checks: append([]HealthCheck{pingCheck}, h.Checks...)}
	mux.Handle("/healthz", hh)
	mux.Handle("/healthz/", hh)
	return mux
}

// Serve serves the health endpoint on l until ctx ends; it returns nil
// then.
func (h *HealthzServer) Serve(ctx context.Context, l net.Listener) error {
	hs := &http.Server{
		Handler:           h.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	klog.FromContext(ctx).Info("Serving healthz", "address", l.Addr().String())
	return serve(ctx, hs, l, false)
}

// Run listens on Address:Port and serves until ctx ends, then returns nil.
// As upstream, an address that cannot be taken (or a server that fails)
// is logged and tried again every 5 seconds rather than stopping the
// agent.
func (h *HealthzServer) Run(ctx context.Context) error {
	if h.Port < 1 || h.Port > 65535 {
		return fmt.Errorf("server: HealthzServer.Port %d is not a port", h.Port)
	}
	clk := h.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	logger := klog.FromContext(ctx)
	addr := net.JoinHostPort(h.Address, fmt.Sprint(h.Port))
	for {
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp", addr)
		if err == nil {
			err = h.Serve(ctx, l)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("stopped serving")
		}
		logger.Error(err, "Failed to start healthz server; retrying", "address", addr, "after", healthzRetry)
		t := clk.NewTimer(healthzRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}
