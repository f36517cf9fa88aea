package bootstrap_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/bootstrap"
)

const testNode = "node-1"

// setup returns a Config for testNode in a fresh directory, its bootstrap
// kubeconfig pointing at an address nobody serves (the fake answers).
func setup(t *testing.T, api *fakeAPI) bootstrap.Config {
	dir := t.TempDir()
	return bootstrap.Config{
		BootstrapKubeconfig: writeBootstrapKubeconfig(t, dir, "https://127.0.0.1:6443", newTestCA(t).certPEM, "", bootstrapToken),
		Kubeconfig:          filepath.Join(dir, "kubelet.conf"),
		CertDir:             filepath.Join(dir, "pki"),
		NodeName:            testNode,
		NewClient:           api.newClient,
	}
}

func TestLoadClientConfigBootstrapsFromNothing(t *testing.T) {
	ca := newTestCA(t)
	api := newFakeAPI(t, issue(t, ca, -time.Minute, time.Hour))
	cfg := setup(t, api)

	rc, err := bootstrap.LoadClientConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(cfg.CertDir, bootstrap.CurrentFile)
	if rc.CertFile != current || rc.KeyFile != current || rc.Host != "https://127.0.0.1:6443" || len(rc.CAData) == 0 || rc.BearerToken != "" {
		t.Errorf("client config: host %q cert %q key %q, CA %d bytes, token %q; want the bootstrap server and CA with %s",
			rc.Host, rc.CertFile, rc.KeyFile, len(rc.CAData), rc.BearerToken, current)
	}
	if fi, err := os.Lstat(current); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s is not a symlink: %v", current, err)
	}
	kc, err := clientcmd.LoadFromFile(cfg.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	auth := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	if auth.ClientCertificate != current || auth.ClientKey != current || auth.Token != "" {
		t.Errorf("kubeconfig credentials %+v, want client-certificate and client-key %s", auth, current)
	}
	if fi, err := os.Stat(cfg.Kubeconfig); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode: %v %v, want 0600", fi.Mode(), err)
	}

	reqs := api.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d CSRs, want 1", len(reqs))
	}
	csr := reqs[0]
	if !strings.HasPrefix(csr.Name, "node-csr-") || csr.Spec.SignerName != "kubernetes.io/kube-apiserver-client-kubelet" {
		t.Errorf("CSR %s signer %s", csr.Name, csr.Spec.SignerName)
	}
	want := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	if !slices.Equal(csr.Spec.Usages, want) {
		t.Errorf("usages %v, want %v (ECDSA key: no key encipherment)", csr.Spec.Usages, want)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if req.Subject.CommonName != "system:node:"+testNode || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("request subject %v", req.Subject)
	}
	if cfgs := api.clientConfigs(); len(cfgs) != 1 || cfgs[0].BearerToken != bootstrapToken {
		t.Errorf("the CSR was not requested with the bootstrap token: %d clients", len(cfgs))
	}
	if leaf := currentLeaf(t, current); leaf.Subject.CommonName != "system:node:"+testNode {
		t.Errorf("stored certificate for %q", leaf.Subject.CommonName)
	}
	if _, err := os.Stat(filepath.Join(cfg.CertDir, "kubelet-client.key.tmp")); !os.IsNotExist(err) {
		t.Errorf("the pending key is left behind: %v", err)
	}
}

func TestLoadClientConfigReusesValidCertificate(t *testing.T) {
	api := newFakeAPI(t, issue(t, newTestCA(t), -time.Minute, time.Hour))
	cfg := setup(t, api)
	if _, err := bootstrap.LoadClientConfig(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	rc, err := bootstrap.LoadClientConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(api.requests()); n != 1 {
		t.Errorf("%d CSRs, want 1: the valid certificate was not reused", n)
	}
	if n := len(api.clientConfigs()); n != 1 {
		t.Errorf("the bootstrap credentials were used %d times, want 1", n)
	}
	if rc.CertFile != filepath.Join(cfg.CertDir, bootstrap.CurrentFile) {
		t.Errorf("cert file %q", rc.CertFile)
	}
}

func TestLoadClientConfigRequestsAgainWhenExpired(t *testing.T) {
	api := newFakeAPI(t, issue(t, newTestCA(t), -time.Minute, time.Hour))
	clk := clocktesting.NewFakeClock(time.Now())
	cfg := setup(t, api)
	cfg.Clock = clk
	if _, err := bootstrap.LoadClientConfig(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(cfg.CertDir, bootstrap.CurrentFile)
	first := currentLeaf(t, current)

	clk.Step(2 * time.Hour) // the certificate expired meanwhile
	api.setDecide(issue(t, newTestCA(t), time.Hour, 3*time.Hour))
	if _, err := bootstrap.LoadClientConfig(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	reqs := api.requests()
	if len(reqs) != 2 || reqs[0].Name == reqs[1].Name {
		t.Fatalf("CSRs %d, want a second one with a new key", len(reqs))
	}
	if second := currentLeaf(t, current); second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Error("the expired certificate is still current")
	}
}

func TestLoadClientConfigDenied(t *testing.T) {
	api := newFakeAPI(t, deny("NotANode", "this host is unknown"))
	cfg := setup(t, api)
	_, err := bootstrap.LoadClientConfig(t.Context(), cfg)
	if err == nil {
		t.Fatal("no error for a denied CSR")
	}
	t.Log(err)
	name := api.requests()[0].Name
	for _, want := range []string{name, "denied", "NotANode", "this host is unknown"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(cfg.Kubeconfig); !os.IsNotExist(err) {
		t.Errorf("kubeconfig written after a denial: %v", err)
	}
	// The next attempt is a new request (a new key), not the denied one.
	api.setDecide(issue(t, newTestCA(t), -time.Minute, time.Hour))
	if _, err := bootstrap.LoadClientConfig(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if reqs := api.requests(); len(reqs) != 2 || reqs[1].Name == name {
		t.Errorf("retry after a denial did not make a new request")
	}
}

func TestLoadClientConfigWaitTimeout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		decide func(*certificatesv1.CertificateSigningRequest)
		want   string
	}{
		{"not approved", nil, "not approved within 10m0s"},
		{"approved, not issued", approve, "approved, but no certificate issued within 10m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, tc.decide)
			clk := clocktesting.NewFakeClock(time.Now())
			cfg := setup(t, api)
			cfg.Clock, cfg.WaitTimeout = clk, 10*time.Minute
			errc := make(chan error, 1)
			go func() {
				_, err := bootstrap.LoadClientConfig(t.Context(), cfg)
				errc <- err
			}()
			// Wait for the request to be made and its timer set.
			if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return len(api.requests()) == 1 && clk.HasWaiters(), nil
			}); err != nil {
				t.Fatal("no request made")
			}
			clk.Step(10 * time.Minute)
			err := <-errc
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), api.requests()[0].Name) {
				t.Errorf("error %v, want one naming the CSR and saying %q", err, tc.want)
			}
		})
	}
}

func TestLoadClientConfigBadInput(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("{not yaml: ["), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-such-bootstrap-kubeconfig")
	api := newFakeAPI(t, nil)
	base := bootstrap.Config{Kubeconfig: filepath.Join(dir, "kubelet.conf"), CertDir: filepath.Join(dir, "pki"), NodeName: testNode, NewClient: api.newClient}
	for _, tc := range []struct {
		name string
		edit func(*bootstrap.Config)
		want []string
	}{
		{"missing bootstrap kubeconfig", func(c *bootstrap.Config) { c.BootstrapKubeconfig = missing }, []string{missing, "does not exist"}},
		{"malformed bootstrap kubeconfig", func(c *bootstrap.Config) { c.BootstrapKubeconfig = garbage }, []string{"bootstrap kubeconfig", garbage}},
		{"empty bootstrap kubeconfig", func(c *bootstrap.Config) { c.BootstrapKubeconfig = empty }, []string{"bootstrap kubeconfig", empty}},
		{"malformed kubeconfig, no bootstrap", func(c *bootstrap.Config) { c.Kubeconfig = garbage }, []string{"kubeconfig", garbage}},
		{"missing kubeconfig, no bootstrap", func(c *bootstrap.Config) {}, []string{base.Kubeconfig, "does not exist"}},
		{"no kubeconfig", func(c *bootstrap.Config) { c.Kubeconfig = "" }, []string{"Config.Kubeconfig"}},
		{"no node name", func(c *bootstrap.Config) { c.BootstrapKubeconfig, c.NodeName = garbage, "" }, []string{"Config.NodeName"}},
		{"no cert dir", func(c *bootstrap.Config) { c.BootstrapKubeconfig, c.CertDir = garbage, "" }, []string{"Config.CertDir"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.edit(&cfg)
			_, err := bootstrap.LoadClientConfig(t.Context(), cfg)
			t.Log(err)
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v does not say %q", err, want)
				}
			}
		})
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("%d CSRs made from bad input", n)
	}
}

func TestLoadClientConfigUnreachableServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := "https://" + l.Addr().String()
	l.Close() // nobody listens there now
	dir := t.TempDir()
	cfg := bootstrap.Config{
		BootstrapKubeconfig: writeBootstrapKubeconfig(t, dir, server, newTestCA(t).certPEM, "", bootstrapToken),
		Kubeconfig:          filepath.Join(dir, "kubelet.conf"),
		CertDir:             filepath.Join(dir, "pki"),
		NodeName:            testNode,
		WaitTimeout:         time.Minute,
	}
	_, err = bootstrap.LoadClientConfig(t.Context(), cfg)
	if err == nil || !strings.Contains(err.Error(), server) || !strings.Contains(err.Error(), cfg.BootstrapKubeconfig) {
		t.Fatalf("error %v, want one naming %s and the bootstrap kubeconfig", err, server)
	}
	t.Log(err)
}
