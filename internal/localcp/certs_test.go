package localcp

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"testing"
	"time"
)

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPKIControlPlaneCertificates(t *testing.T) {
	now := time.Now()
	authority, err := newCA(now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := authority.write(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	loaded, err := loadCA(certFile, keyFile)
	if err != nil {
		t.Fatalf("loadCA: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(loaded.cert)

	serving, err := loaded.issue(now, apiserverServingSpec())
	if err != nil {
		t.Fatal(err)
	}
	sc := parseCert(t, serving.certPEM)
	for _, host := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc", kubernetesServiceIP} {
		if _, err := sc.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	if _, err := tls.X509KeyPair(serving.certPEM, serving.keyPEM); err != nil {
		t.Errorf("serving key pair: %v", err)
	}

	node, err := authority.issue(now, nodeClientSpec("n1"))
	if err != nil {
		t.Fatal(err)
	}
	nc := parseCert(t, node.certPEM)
	if nc.Subject.CommonName != "system:node:n1" || len(nc.Subject.Organization) != 1 || nc.Subject.Organization[0] != "system:nodes" {
		t.Errorf("node subject = %v", nc.Subject)
	}
	if _, err := nc.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("node client certificate: %v", err)
	}
	if _, err := nc.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("node client certificate is valid for server auth")
	}
	if _, err := authority.issue(now, certSpec{commonName: "x"}); err == nil {
		t.Error("issue without usages succeeded")
	}
	if nc.NotBefore.After(now) || !nc.NotAfter.After(now.Add(300*24*time.Hour)) {
		t.Errorf("node validity %s..%s", nc.NotBefore, nc.NotAfter)
	}
}

func TestPKIControlPlaneServiceAccountKey(t *testing.T) {
	priv, pub, err := newServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode(priv)
	key, err := x509.ParsePKCS1PrivateKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ub, _ := pem.Decode(pub)
	pk, err := x509.ParsePKIXPublicKey(ub.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !key.PublicKey.Equal(pk) {
		t.Error("service-account public key does not match the private key")
	}
}
