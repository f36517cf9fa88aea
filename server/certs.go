package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/certstore"
)

// selfSignedValidity is how long a self-signed serving certificate lasts.
const selfSignedValidity = 365 * 24 * time.Hour

// CertificateSource supplies the serving certificate for each TLS
// handshake; tls.Config.GetCertificate has this shape. It must be safe for
// concurrent use and must not block on the network.
type CertificateSource interface {
	GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error)
}

// StaticCertificate is a fixed serving certificate.
type StaticCertificate struct {
	cert *tls.Certificate
}

// GetCertificate returns the certificate.
func (s *StaticCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cert, nil
}

// Leaf returns the parsed leaf certificate.
func (s *StaticCertificate) Leaf() *x509.Certificate { return s.cert.Leaf }

// LoadCertificateFiles reads a serving certificate (PEM, leaf first, then
// intermediates) and its private key, e.g. the KubeletConfiguration's
// tlsCertFile and tlsPrivateKeyFile. The files are read once.
func LoadCertificateFiles(certFile, keyFile string) (*StaticCertificate, error) {
	pair, err := certstore.LoadPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server: serving %w", err)
	}
	return &StaticCertificate{cert: pair}, nil
}

// NewSelfSignedCertificate makes a self-signed serving certificate (ECDSA
// P-256, one year) for host and the given addresses and names, as upstream
// kubelet does when it is given no certificate and no rotation. Clients
// cannot verify it against a CA; the API server does not verify kubelets
// unless --kubelet-certificate-authority is set. clk may be nil.
func NewSelfSignedCertificate(host string, ips []net.IP, dnsNames []string, clk clock.PassiveClock) (*StaticCertificate, error) {
	if host == "" {
		return nil, errors.New("server: self-signed certificate: empty host name")
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("server: self-signed certificate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("server: self-signed certificate serial: %w", err)
	}
	now := clk.Now()
	names := append([]string{host}, dnsNames...)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", host, now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              dedupe(names),
		IPAddresses:           ips,
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.DNSNames = dedupe(dnsNames)
		tmpl.IPAddresses = append([]net.IP{ip}, ips...)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("server: self-sign certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("server: parse self-signed certificate: %w", err)
	}
	return &StaticCertificate{cert: &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}, nil
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
