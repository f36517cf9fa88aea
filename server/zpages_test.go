package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestStatuszFlagz(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	info := &Statusz{ComponentName: "kubelet", StartTime: clk.Now().Add(-(time.Hour + 2*time.Minute + 3*time.Second)),
		BinaryVersion: "1.37.2", EmulationVersion: "1.37", GoVersion: "go1.26"}
	s := debugServer(t, Config{Clock: clk, Statusz: info, Flagz: func() map[string]string {
		return map[string]string{"v": "2", "config": "/etc/kubelet.yaml"}
	}}, AlwaysAllow{})

	w := serveDebug(t, s, "GET", "/statusz", "")
	body := w.Body.String()
	// clk's nanoseconds are 0: the delimiter is ":".
	for _, want := range []string{"\nkubelet statusz\nWarning: This endpoint is not meant to be machine parseable",
		"\nUp: 1 hr 02 min 03 sec\n", "\nBinary version: 1.37.2\n", "\nEmulation version: 1.37\n", "\nGo version: go1.26\n",
		"\nPaths: /attach /configz /containerLogs /debug /exec /flagz /healthz /logs /metrics /pods /portForward /runningpods /stats /statusz\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/statusz lacks %q:\n%s", want, body)
		}
	}
	if ct := w.Header().Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("/statusz Content-Type %q", ct)
	}

	r := httptest.NewRequestWithContext(t.Context(), "GET", "/statusz", nil)
	r.Header.Set("Authorization", "Bearer t")
	r.Header.Set("Accept", "application/json;as=Statusz;v=v1beta1;g=config.k8s.io")
	rw := httptest.NewRecorder()
	s.Handler().ServeHTTP(rw, r)
	var st struct {
		Kind, APIVersion string
		UptimeSeconds    int64
		BinaryVersion    string
	}
	if err := json.Unmarshal(rw.Body.Bytes(), &st); err != nil || st.Kind != "Statusz" || st.APIVersion != "config.k8s.io/v1beta1" ||
		st.UptimeSeconds != 3723 || st.BinaryVersion != "1.37.2" {
		t.Errorf("structured /statusz: %v %+v %s", err, st, rw.Body)
	}
	r.Header.Set("Accept", "application/xml")
	rw = httptest.NewRecorder()
	s.Handler().ServeHTTP(rw, r)
	if rw.Code != 406 {
		t.Errorf("/statusz as XML: %d, want 406", rw.Code)
	}

	w = serveDebug(t, s, "GET", "/flagz", "")
	if want := "\nkubelet flagz\nWarning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.\n\nconfig:/etc/kubelet.yaml\nv:2\n"; w.Body.String() != want {
		t.Errorf("/flagz = %q, want %q", w.Body, want)
	}

	// Without them (and on the read-only port) neither is served.
	none := debugServer(t, Config{}, AlwaysAllow{})
	for _, p := range []string{"/statusz", "/flagz"} {
		if w := serveDebug(t, none, "GET", p, ""); w.Code != 404 {
			t.Errorf("%s unset: %d", p, w.Code)
		}
		r := httptest.NewRequestWithContext(t.Context(), "GET", p, nil)
		rw := httptest.NewRecorder()
		s.ReadOnlyHandler().ServeHTTP(rw, r)
		if rw.Code != 404 {
			t.Errorf("%s on the read-only port: %d", p, rw.Code)
		}
	}
}

func TestMetricsSLIs(t *testing.T) {
	failing := errors.New("stuck")
	var err error
	s := debugServer(t, Config{HealthChecks: []HealthCheck{{Name: "syncloop", Check: func(context.Context) error { return err }}}}, AlwaysAllow{})
	serveDebug(t, s, "GET", "/healthz", "")
	err = failing
	serveDebug(t, s, "GET", "/healthz", "")
	serveDebug(t, s, "GET", "/healthz/syncloop", "") // a single check is not recorded, as upstream
	body := serveDebug(t, s, "GET", "/metrics/slis", "").Body.String()
	for _, want := range []string{
		"# HELP kubernetes_healthcheck [STABLE] This metric records the result of a single healthcheck.",
		`kubernetes_healthcheck{name="ping",type="healthz"} 1`,
		`kubernetes_healthcheck{name="syncloop",type="healthz"} 0`,
		`kubernetes_healthchecks_total{name="syncloop",status="error",type="healthz"} 1`,
		`kubernetes_healthchecks_total{name="syncloop",status="success",type="healthz"} 1`,
		`kubernetes_healthchecks_total{name="ping",status="success",type="healthz"} 2`,
		"process_start_time_seconds ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics/slis lacks %q:\n%s", want, body)
		}
	}
	if w := serveDebug(t, s, "DELETE", "/metrics/slis", ""); w.Body.String() != "metrics reset\n" {
		t.Errorf("DELETE: %q", w.Body)
	}
	if body := serveDebug(t, s, "GET", "/metrics/slis", "").Body.String(); strings.Contains(body, "kubernetes_healthcheck{") {
		t.Errorf("after reset:\n%s", body)
	}
}

type fakeContainerMetrics struct{ ctx context.Context }

func (f *fakeContainerMetrics) Gatherer(ctx context.Context) prometheus.Gatherer {
	f.ctx = ctx
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "machine_cpu_cores", Help: "Number of logical CPU cores."})
	g.Set(2)
	reg.MustRegister(g)
	return reg
}

var _ ContainerMetrics = (*fakeContainerMetrics)(nil)

func TestMetricsCadvisorRoute(t *testing.T) {
	cm := &fakeContainerMetrics{}
	reg := prometheus.NewRegistry()
	s := debugServer(t, Config{ContainerMetrics: cm, MetricsRegisterer: reg}, AlwaysAllow{})
	if w := serveDebug(t, s, "GET", "/metrics/cadvisor", ""); w.Code != 200 || !strings.Contains(w.Body.String(), "machine_cpu_cores 2") {
		t.Fatalf("/metrics/cadvisor: %d %q", w.Code, w.Body)
	}
	if cm.ctx == nil {
		t.Error("Gatherer got no request context")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "path" && l.GetValue() == "metrics/cadvisor" {
					found = true
				}
			}
		}
	}
	if !found {
		t.Error(`no kubelet_http_requests_total{path="metrics/cadvisor"}`)
	}
}
