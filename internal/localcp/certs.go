package localcp

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// Identities the control plane issues certificates for.
const (
	// KubeletClientUser is the CN of the certificate kube-apiserver presents
	// to node agents (--kubelet-client-certificate). Start binds it to the
	// cluster role system:kubelet-api-admin.
	KubeletClientUser = "kube-apiserver-kubelet-client"
	// AdminUser is the CN of the admin client certificate (group system:masters).
	AdminUser = "nodekit-admin"

	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	clockSkew    = time.Hour
)

// ca is a certificate authority held in memory: it signs every certificate
// of one control plane.
type ca struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// certSpec describes one leaf certificate.
type certSpec struct {
	commonName string
	orgs       []string
	dnsNames   []string
	ips        []net.IP
	server     bool // ExtKeyUsageServerAuth
	client     bool // ExtKeyUsageClientAuth
}

// keyPair is a PEM-encoded certificate and its private key.
type keyPair struct {
	certPEM []byte
	keyPEM  []byte
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate certificate serial number: %w", err)
	}
	return n, nil
}

// newCA generates a self-signed ECDSA P-256 CA valid from now.
func newCA(now time.Time) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "nodekit-local-ca", Organization: []string{"nodekit"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &ca{cert: cert, key: key, certPEM: pemEncode("CERTIFICATE", der)}, nil
}

// loadCA reads a CA written by (*ca).write.
func loadCA(certFile, keyFile string) (*ca, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("CA certificate %s: no PEM CERTIFICATE block", certFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate %s: %w", certFile, err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("CA key %s: no PEM EC PRIVATE KEY block", keyFile)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CA key %s: %w", keyFile, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("CA key %s does not match certificate %s", keyFile, certFile)
	}
	return &ca{cert: cert, key: key, certPEM: certPEM}, nil
}

// write stores the CA certificate and key.
func (c *ca) write(certFile, keyFile string) error {
	keyDER, err := x509.MarshalECPrivateKey(c.key)
	if err != nil {
		return fmt.Errorf("encode CA key: %w", err)
	}
	return writePair(certFile, keyFile, keyPair{certPEM: c.certPEM, keyPEM: pemEncode("EC PRIVATE KEY", keyDER)})
}

// issue creates a fresh ECDSA P-256 key and a certificate for it signed by c.
func (c *ca) issue(now time.Time, spec certSpec) (keyPair, error) {
	if spec.commonName == "" {
		return keyPair{}, errors.New("certificate spec has an empty common name")
	}
	if !spec.server && !spec.client {
		return keyPair{}, fmt.Errorf("certificate %q: neither server nor client usage", spec.commonName)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generate key for %q: %w", spec.commonName, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return keyPair{}, err
	}
	var usages []x509.ExtKeyUsage
	if spec.server {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	if spec.client {
		usages = append(usages, x509.ExtKeyUsageClientAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: spec.commonName, Organization: spec.orgs},
		DNSNames:              spec.dnsNames,
		IPAddresses:           spec.ips,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(leafValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usages,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("sign certificate %q: %w", spec.commonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return keyPair{}, fmt.Errorf("encode key for %q: %w", spec.commonName, err)
	}
	return keyPair{certPEM: pemEncode("CERTIFICATE", der), keyPEM: pemEncode("EC PRIVATE KEY", keyDER)}, nil
}

// newServiceAccountKey generates the RSA key kube-apiserver signs service
// account tokens with, PEM-encoded (PKCS#1 private key, PKIX public key).
func newServiceAccountKey() (privPEM, pubPEM []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, fmt.Errorf("generate service-account RSA key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encode service-account public key: %w", err)
	}
	return pemEncode("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)), pemEncode("PUBLIC KEY", pubDER), nil
}

// apiserverServingSpec is the serving certificate of kube-apiserver: valid for
// loopback and the in-cluster names of the kubernetes service.
func apiserverServingSpec() certSpec {
	return certSpec{
		commonName: "kube-apiserver",
		dnsNames: []string{
			"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
		},
		ips:    []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback, net.ParseIP(kubernetesServiceIP)},
		server: true,
	}
}

// nodeClientSpec is the client certificate of a node agent, exactly as a
// real kubelet has: the Node authorizer and NodeRestriction apply to it.
func nodeClientSpec(node string) certSpec {
	return certSpec{commonName: "system:node:" + node, orgs: []string{"system:nodes"}, client: true}
}

func pemEncode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// writePair writes a certificate (0644) and its key (0600), creating the
// directory if needed.
func writePair(certFile, keyFile string, kp keyPair) error {
	if err := os.MkdirAll(filepath.Dir(certFile), 0o755); err != nil {
		return fmt.Errorf("create certificate directory: %w", err)
	}
	if err := fsutil.WriteFileAtomic(keyFile, kp.keyPEM, 0o600); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(certFile, kp.certPEM, 0o644)
}
