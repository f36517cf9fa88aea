package bootstrap_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/bootstrap"
)

// whoami serves the serial number of the client certificate a request
// came with.
func whoami(t *testing.T) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client certificate", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, r.TLS.PeerCertificates[0].SerialNumber)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body)
}

func TestRotatorRenewsAndReconnects(t *testing.T) {
	srv := whoami(t)
	ca := newTestCA(t)
	// The first certificate is 91% through its life: due for renewal.
	api := newFakeAPI(t, issue(t, ca, -50*time.Minute, 5*time.Minute))
	dir := t.TempDir()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	rotated := make(chan *x509.Certificate, 4)
	cfg := bootstrap.Config{
		BootstrapKubeconfig: writeBootstrapKubeconfig(t, dir, srv.URL, caPEM, "", bootstrapToken),
		Kubeconfig:          filepath.Join(dir, "kubelet.conf"),
		CertDir:             filepath.Join(dir, "pki"),
		NodeName:            testNode,
		NewClient:           api.newClient,
		OnRotate:            func(leaf *x509.Certificate) { rotated <- leaf },
	}
	rc, err := bootstrap.LoadClientConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := currentLeaf(t, rc.CertFile)

	rot, err := bootstrap.NewRotator(t.Context(), cfg, rc)
	if err != nil {
		t.Fatal(err)
	}
	if c := rot.Current(); c == nil || c.Leaf.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatal("the rotator does not start from the bootstrapped certificate")
	}
	hc, err := rest.HTTPClientFor(rot.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, hc, srv.URL); got != first.SerialNumber.String() {
		t.Fatalf("before rotation the client presented %s, want %s", got, first.SerialNumber)
	}

	api.setDecide(issue(t, ca, -time.Minute, time.Hour))
	done := make(chan error, 1)
	go func() { done <- rot.Run(t.Context()) }()
	var second *x509.Certificate
	select {
	case second = <-rotated:
	case err := <-done:
		t.Fatalf("Run returned %v before rotating", err)
	case <-time.After(time.Minute):
		t.Fatal("no rotation within a minute")
	}
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("rotated to the same certificate")
	}
	// The same client, without a restart, now presents the new certificate
	// (its kept-alive connection was closed).
	if got := get(t, hc, srv.URL); got != second.SerialNumber.String() {
		t.Errorf("after rotation the client presented %s, want %s", got, second.SerialNumber)
	}
	if onDisk := currentLeaf(t, filepath.Join(cfg.CertDir, bootstrap.CurrentFile)); onDisk.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Error("the new certificate is not current on disk")
	}
	// The renewal was requested with the node's certificate, not the token.
	cfgs := api.clientConfigs()
	if last := cfgs[len(cfgs)-1]; last.BearerToken != "" || last.Transport == nil {
		t.Errorf("renewal requested with token %q / transport %v, want the rotating certificate", last.BearerToken, last.Transport)
	}
	if err := rot.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "more than once") {
		t.Errorf("second Run: %v", err)
	}
}

func TestNewRotatorBadInput(t *testing.T) {
	dir := t.TempDir()
	rc := &rest.Config{Host: "https://127.0.0.1:6443"}
	for _, tc := range []struct {
		name string
		cfg  bootstrap.Config
		rc   *rest.Config
		want string
	}{
		{"no cert dir", bootstrap.Config{NodeName: testNode}, rc, "Config.CertDir"},
		{"no node", bootstrap.Config{CertDir: dir}, rc, "Config.NodeName"},
		{"no client config", bootstrap.Config{CertDir: dir, NodeName: testNode}, nil, "client config is nil"},
		{"bad CA file", bootstrap.Config{CertDir: dir, NodeName: testNode},
			&rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "no-ca.crt")}}, "no-ca.crt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bootstrap.NewRotator(t.Context(), tc.cfg, tc.rc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// renewErrorCounter registers rot's metrics and returns a reader of
// kubelet_certificate_manager_client_expiration_renew_errors.
func renewErrorCounter(t *testing.T, rot *bootstrap.Rotator) func() float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := rot.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	return func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "kubelet_certificate_manager_client_expiration_renew_errors" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("kubelet_certificate_manager_client_expiration_renew_errors not gathered")
		return 0
	}
}

// A renewal the signer denies counts in
// kubelet_certificate_manager_client_expiration_renew_errors.
func TestRotatorCountsRenewalErrors(t *testing.T) {
	srv := whoami(t)
	ca := newTestCA(t)
	api := newFakeAPI(t, issue(t, ca, -50*time.Minute, 5*time.Minute)) // due for renewal
	dir := t.TempDir()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cfg := bootstrap.Config{
		BootstrapKubeconfig: writeBootstrapKubeconfig(t, dir, srv.URL, caPEM, "", bootstrapToken),
		Kubeconfig:          filepath.Join(dir, "kubelet.conf"),
		CertDir:             filepath.Join(dir, "pki"),
		NodeName:            testNode,
		NewClient:           api.newClient,
	}
	rc, err := bootstrap.LoadClientConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rot, err := bootstrap.NewRotator(t.Context(), cfg, rc)
	if err != nil {
		t.Fatal(err)
	}
	count := renewErrorCounter(t, rot)
	if n := count(); n != 0 {
		t.Fatalf("renew errors before any renewal = %v", n)
	}
	api.setDecide(deny("NotNow", "denied by the test"))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rot.Run(ctx) }()
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return count() >= 1, nil
	})
	cancel()
	if runErr := <-done; runErr != nil {
		t.Logf("Run: %v", runErr)
	}
	if err != nil {
		t.Fatalf("no renewal error counted within a minute of a denied renewal (count %v)", count())
	}
}

// clockedSetup bootstraps testNode on clk through api, lets age pass on
// clk, and returns a Rotator of its certificate (not running) and the
// channel its OnRotate sends on. The Rotator has no validity check
// (Config.ExitAfter negative), so that clk has waiters only while the
// renewal loop waits; clockedSetupExiting's has the default one.
func clockedSetup(t *testing.T, clk *clocktesting.FakeClock, api *fakeAPI, age time.Duration) (*bootstrap.Rotator, chan *x509.Certificate) {
	t.Helper()
	return clockedSetupExiting(t, clk, api, age, -1)
}

func clockedSetupExiting(t *testing.T, clk *clocktesting.FakeClock, api *fakeAPI, age, exitAfter time.Duration) (*bootstrap.Rotator, chan *x509.Certificate) {
	t.Helper()
	cfg := setup(t, api)
	cfg.Clock, cfg.ExitAfter = clk, exitAfter
	rotated := make(chan *x509.Certificate, 8)
	cfg.OnRotate = func(leaf *x509.Certificate) { rotated <- leaf }
	rc, err := bootstrap.LoadClientConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(age)
	rot, err := bootstrap.NewRotator(t.Context(), cfg, rc)
	if err != nil {
		t.Fatal(err)
	}
	return rot, rotated
}

// run starts rot.Run until the test ends.
func run(t *testing.T, rot *bootstrap.Rotator) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rot.Run(ctx) }()
	t.Cleanup(func() { cancel(); _ = <-done })
}

// until polls cond (real time, bounded) and fails the test if it never holds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("never: %s", what)
	}
}

func TestRotatorRenewsOnItsClock(t *testing.T) {
	ca := newTestCA(t)
	clk := clocktesting.NewFakeClock(time.Now())
	// Valid for 61 minutes from a minute ago: due between 41.7 and 53.9
	// minutes from now.
	api := newFakeAPI(t, issueAt(t, ca, clk, -time.Minute, time.Hour))
	rot, rotated := clockedSetup(t, clk, api, 0)
	run(t, rot)
	until(t, "Run waits for the deadline", clk.HasWaiters)
	if n := len(api.requests()); n != 1 {
		t.Fatalf("%d requests before the deadline, want only the bootstrap one", n)
	}
	clk.Step(54 * time.Minute)
	select {
	case leaf := <-rotated:
		if want := clk.Now().Add(time.Hour); leaf.NotAfter.Sub(want).Abs() > time.Second {
			t.Errorf("rotated to a certificate ending %v, want the new one ending %v", leaf.NotAfter, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no rotation after the clock passed 90% of the certificate's life")
	}
	if n := len(api.requests()); n != 2 {
		t.Errorf("%d requests, want the bootstrap one and one renewal", n)
	}
	cfgs := api.clientConfigs()
	if last := cfgs[len(cfgs)-1]; last.BearerToken != "" {
		t.Errorf("renewal of a valid certificate made with the bootstrap token")
	}
	// The next renewal waits for the new certificate's deadline.
	until(t, "Run waits for the next deadline", clk.HasWaiters)
	clk.Step(time.Second) // the pause between renewals
	until(t, "Run waits for the next deadline", clk.HasWaiters)
	if n := len(api.requests()); n != 2 {
		t.Errorf("%d requests right after a renewal, want 2", n)
	}
}

// A failed renewal is retried after 2, 4, 8 and 16 seconds (each up to
// 10% more), then every 32 seconds; each failure counts.
func TestRotatorBacksOffOnItsClock(t *testing.T) {
	ca := newTestCA(t)
	clk := clocktesting.NewFakeClock(time.Now())
	api := newFakeAPI(t, issueAt(t, ca, clk, -50*time.Minute, 5*time.Minute)) // due now
	rot, rotated := clockedSetup(t, clk, api, 0)
	errorsCounted := renewErrorCounter(t, rot)
	api.setDecide(deny("NotNow", "try later"))
	run(t, rot)
	for i, step := range []time.Duration{0, 2200 * time.Millisecond, 4400 * time.Millisecond, 8800 * time.Millisecond, 17600 * time.Millisecond, 32 * time.Second, 32 * time.Second} {
		clk.Step(step)
		attempts := i + 1
		until(t, fmt.Sprintf("attempt %d failed and Run waits to retry", attempts), func() bool {
			return len(api.requests()) == 1+attempts && errorsCounted() == float64(attempts) && clk.HasWaiters()
		})
	}
	// Once the signer relents the next retry succeeds.
	api.setDecide(issueAt(t, ca, clk, -time.Minute, time.Hour))
	clk.Step(32 * time.Second)
	select {
	case <-rotated:
	case <-time.After(20 * time.Second):
		t.Fatal("no rotation once the signer issued")
	}
	if n := errorsCounted(); n != 7 {
		t.Errorf("%v renewal errors counted, want 7", n)
	}
}

// Once the certificate has expired (the API server was unreachable, say)
// the renewal is requested with the bootstrap credentials.
func TestRotatorFallsBackToBootstrapOnceExpired(t *testing.T) {
	ca := newTestCA(t)
	clk := clocktesting.NewFakeClock(time.Now())
	api := newFakeAPI(t, issueAt(t, ca, clk, -time.Minute, time.Hour))
	rot, rotated := clockedSetup(t, clk, api, 2*time.Hour)
	if rot.Current() != nil {
		t.Fatal("an expired certificate is current")
	}
	run(t, rot)
	select {
	case leaf := <-rotated:
		if !leaf.NotAfter.After(clk.Now()) {
			t.Errorf("rotated to a certificate ending %v, before now %v", leaf.NotAfter, clk.Now())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("an expired certificate was not renewed at once")
	}
	cfgs := api.clientConfigs()
	if last := cfgs[len(cfgs)-1]; last.BearerToken != bootstrapToken {
		t.Errorf("renewal of an expired certificate made with token %q, want the bootstrap token", last.BearerToken)
	}
	if rot.Current() == nil {
		t.Error("no current certificate after the renewal")
	}
}
