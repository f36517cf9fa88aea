package server

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// signCSR issues a certificate for a serving CSR, valid from notBefore for
// validity, signed by ca.
func (ca *testCA) signCSR(t *testing.T, csr *certificatesv1.CertificateSigningRequest, notBefore time.Time, validity time.Duration) []byte {
	t.Helper()
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		t.Fatal("CSR request is not PEM")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: req.Subject,
		DNSNames: req.DNSNames, IPAddresses: req.IPAddresses,
		NotBefore: notBefore, NotAfter: notBefore.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, req.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// fakeCSRs is a fake clientset whose CSR creates get a name and UID, with
// a watch the test reads new requests from.
func fakeCSRs(t *testing.T) (*fake.Clientset, <-chan *certificatesv1.CertificateSigningRequest) {
	t.Helper()
	cs := fake.NewClientset()
	n := 0
	created := make(chan *certificatesv1.CertificateSigningRequest, 10)
	cs.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		n++
		obj.Name = obj.GenerateName + string(rune('a'+n))
		obj.UID = types.UID("uid-" + obj.Name)
		created <- obj.DeepCopy()
		return false, nil, nil
	})
	return cs, created
}

func approve(t *testing.T, cs *fake.Clientset, csr *certificatesv1.CertificateSigningRequest, cert []byte) {
	t.Helper()
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", Message: "approved by the test",
	})
	csr.Status.Certificate = cert
	if _, err := cs.CertificatesV1().CertificateSigningRequests().UpdateStatus(context.Background(), csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestCSRCertificate(t *testing.T) {
	ca := newTestCA(t)
	cs, created := fakeCSRs(t)
	dir := t.TempDir()
	start := time.Now().Truncate(time.Second)
	clk := clocktesting.NewFakeClock(start)
	cfg := CSRConfig{
		Client: cs.CertificatesV1().CertificateSigningRequests(), NodeName: "node-1",
		IPs: []net.IP{net.ParseIP("10.88.0.1")}, DNSNames: []string{"node-1"}, Dir: dir, Clock: clk,
	}
	c, err := NewCSRCertificate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetCertificate(nil); err == nil {
		t.Fatal("a certificate before any was issued")
	}
	done := make(chan error, 1)
	go func() {
		rotated, err := c.RotateIfDue(t.Context())
		if err == nil && !rotated {
			t.Error("RotateIfDue without a certificate did not rotate")
		}
		done <- err
	}()
	csr := <-created
	if csr.Spec.SignerName != KubeletServingSigner || !slices.Equal(csr.Spec.Usages, []certificatesv1.KeyUsage{"digital signature", "server auth"}) {
		t.Fatalf("CSR spec %+v", csr.Spec)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	req, _ := x509.ParseCertificateRequest(block.Bytes)
	if req.Subject.CommonName != "system:node:node-1" || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) ||
		!slices.Equal(req.DNSNames, []string{"node-1"}) || len(req.IPAddresses) != 1 || !req.IPAddresses[0].Equal(net.ParseIP("10.88.0.1")) {
		t.Fatalf("CSR request subject %v, SANs %v %v", req.Subject, req.DNSNames, req.IPAddresses)
	}
	approve(t, cs, csr, ca.signCSR(t, csr, start, 10*time.Hour))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cert, err := c.GetCertificate(nil)
	if err != nil || cert.Leaf.Subject.CommonName != "system:node:node-1" {
		t.Fatalf("issued certificate: %v %v", cert, err)
	}
	if want := start.Add(8 * time.Hour); !c.NextRotation().Equal(want) {
		t.Fatalf("next rotation %v, want %v (80%% of the lifetime)", c.NextRotation(), want)
	}
	if rotated, err := c.RotateIfDue(t.Context()); rotated || err != nil {
		t.Fatalf("RotateIfDue before the deadline: %v %v", rotated, err)
	}

	// A restarted agent serves the kept certificate at once.
	again, err := NewCSRCertificate(cfg)
	if err != nil || again.Current() == nil || !again.Current().Leaf.Equal(cert.Leaf) {
		t.Fatalf("kept certificate not loaded: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, CurrentServingCertFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kept file: %v %v", fi, err)
	}

	// Run rotates at the deadline.
	ctx, cancel := context.WithCancel(t.Context())
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()
	clk.Step(8*time.Hour + time.Second)
	csr = <-created
	approve(t, cs, csr, ca.signCSR(t, csr, clk.Now(), 10*time.Hour))
	// Wait for the new certificate to be installed.
	err = wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return !c.Current().Leaf.Equal(cert.Leaf), nil
	})
	if err != nil {
		t.Fatal("rotated certificate not installed")
	}
	if want := clk.Now().Add(8 * time.Hour); !c.NextRotation().Equal(want) {
		t.Fatalf("after rotation: next %v, want %v", c.NextRotation(), want)
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
}

func TestCSRCertificateDenied(t *testing.T) {
	cs, created := fakeCSRs(t)
	c, err := NewCSRCertificate(CSRConfig{Client: cs.CertificatesV1().CertificateSigningRequests(), NodeName: "n", DNSNames: []string{"n"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Rotate(t.Context()) }()
	csr := (<-created).DeepCopy()
	csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "NotYou"}}
	if _, err := cs.CertificatesV1().CertificateSigningRequests().UpdateStatus(context.Background(), csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || c.Current() != nil {
		t.Fatalf("denied CSR: %v", err)
	}
}

func TestCSRConfigValidation(t *testing.T) {
	cs := fake.NewClientset()
	for name, cfg := range map[string]CSRConfig{
		"no client": {NodeName: "n", DNSNames: []string{"n"}},
		"no node":   {Client: cs.CertificatesV1().CertificateSigningRequests(), DNSNames: []string{"n"}},
		"no SANs":   {Client: cs.CertificatesV1().CertificateSigningRequests(), NodeName: "n"},
	} {
		if _, err := NewCSRCertificate(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSelfSignedCertificate(t *testing.T) {
	c, err := NewSelfSignedCertificate("node-1", []net.IP{net.ParseIP("10.0.0.1")}, []string{"node-1.local"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf := c.Leaf()
	if err := leaf.VerifyHostname("node-1"); err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("node-1.local"); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSelfSignedCertificate("", nil, nil, nil); err == nil {
		t.Fatal("empty host accepted")
	}
}

// With CSRConfig.Metrics: the TTL is +Inf until a certificate is issued,
// then the seconds to its expiry; a denied request counts as a renewal
// error; a rotation observes how long the replaced certificate lived.
func TestCSRCertificateMetrics(t *testing.T) {
	ca := newTestCA(t)
	cs, created := fakeCSRs(t)
	start := time.Now().Truncate(time.Second)
	clk := clocktesting.NewFakeClock(start)
	reg := prometheus.NewPedanticRegistry()
	c, err := NewCSRCertificate(CSRConfig{Client: cs.CertificatesV1().CertificateSigningRequests(), NodeName: "n",
		DNSNames: []string{"n"}, Clock: clk, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	gauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "kubelet_certificate_manager_server_ttl_seconds" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no kubelet_certificate_manager_server_ttl_seconds")
		return 0
	}
	if v := gauge(); !math.IsInf(v, 1) {
		t.Errorf("TTL before issuance = %v, want +Inf", v)
	}
	rotate := func(decide func(*certificatesv1.CertificateSigningRequest)) error {
		done := make(chan error, 1)
		go func() { done <- c.Rotate(t.Context()) }()
		decide(<-created)
		return <-done
	}
	deny := func(csr *certificatesv1.CertificateSigningRequest) {
		csr = csr.DeepCopy()
		csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "NotYou"}}
		if _, err := cs.CertificatesV1().CertificateSigningRequests().UpdateStatus(context.Background(), csr, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	issue := func(csr *certificatesv1.CertificateSigningRequest) {
		approve(t, cs, csr, ca.signCSR(t, csr, clk.Now(), 10*time.Hour))
	}
	if err := rotate(deny); err == nil {
		t.Fatal("a denied request rotated")
	}
	if n := testutil.ToFloat64(c.metrics.renewErrors); n != 1 {
		t.Errorf("renew errors after a denial = %v, want 1", n)
	}
	if err := rotate(issue); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Hour)
	if v := gauge(); v != 9*3600 {
		t.Errorf("TTL an hour after issuance = %v, want %v", v, 9*3600)
	}
	if err := rotate(issue); err != nil {
		t.Fatal(err)
	}
	if got, err := testutil.GatherAndCount(reg, "kubelet_certificate_manager_server_rotation_seconds"); err != nil || got != 1 {
		t.Errorf("rotation histogram series = %d (%v)", got, err)
	}
	want := `
# HELP kubelet_server_expiration_renew_errors [ALPHA] Counter of certificate renewal errors.
# TYPE kubelet_server_expiration_renew_errors counter
kubelet_server_expiration_renew_errors 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_server_expiration_renew_errors"); err != nil {
		t.Error(err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "kubelet_certificate_manager_server_rotation_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 1 || h.GetSampleSum() != 3600 {
				t.Errorf("rotation age: %d samples, sum %v; want one of 3600 s", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
}
