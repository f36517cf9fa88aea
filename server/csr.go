package server

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodekit/nodekit/internal/fsutil"
)

const (
	// KubeletServingSigner is the signer of kubelet serving certificates.
	KubeletServingSigner = "kubernetes.io/kubelet-serving"
	// CurrentServingCertFile is the file (certificate and key, PEM) under
	// CSRConfig.Dir that keeps the current certificate across restarts.
	CurrentServingCertFile = "kubelet-server-current.pem"

	defaultCSRWaitTimeout = 15 * time.Minute
	csrRetryMin           = 2 * time.Second
	csrRetryMax           = 5 * time.Minute
)

// CSRClient creates and follows CertificateSigningRequests; client-go's
// CertificatesV1().CertificateSigningRequests() satisfies it.
type CSRClient interface {
	Create(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, opts metav1.CreateOptions) (*certificatesv1.CertificateSigningRequest, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*certificatesv1.CertificateSigningRequest, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// CSRConfig configures NewCSRCertificate. Client and NodeName are required,
// and at least one of IPs and DNSNames.
type CSRConfig struct {
	Client   CSRClient
	NodeName string
	// IPs and DNSNames are the certificate's subject alternative names: the
	// node's addresses and host names.
	IPs      []net.IP
	DNSNames []string
	// Dir keeps the current certificate and key (CurrentServingCertFile),
	// so a restarted agent serves at once; "" keeps them in memory only.
	Dir string
	// ExpirationSeconds, if set, asks the signer for that validity.
	ExpirationSeconds *int32
	// Jitter returns a number in [0,1) choosing when, between 70% and 90%
	// of a certificate's lifetime, the next one is requested (upstream
	// draws it at random). Nil means 0.5: at 80%.
	Jitter func() float64
	// WaitTimeout bounds the wait for approval and issuance of one request.
	// Default 15 minutes.
	WaitTimeout time.Duration
	// Clock times rotation, retries and the wait. Default the real clock.
	Clock clock.Clock
	// Metrics, if set, gets upstream's serving-certificate series:
	// kubelet_server_expiration_renew_errors (failed requests),
	// kubelet_certificate_manager_server_rotation_seconds (how long a
	// replaced certificate had lived) and
	// kubelet_certificate_manager_server_ttl_seconds.
	Metrics prometheus.Registerer
}

// CSRCertificate is a serving certificate requested from the API server
// with a kubernetes.io/kubelet-serving CertificateSigningRequest (subject
// system:node:NAME in group system:nodes) and renewed before it expires,
// as upstream kubelet's serverTLSBootstrap. Someone must approve the
// requests: upstream kube-controller-manager does not approve serving
// certificates by itself. Until the first certificate is issued, TLS
// handshakes fail.
type CSRCertificate struct {
	cfg CSRConfig

	metrics *csrMetrics // nil without CSRConfig.Metrics

	mu       sync.RWMutex
	cert     *tls.Certificate
	deadline time.Time
}

var _ CertificateSource = (*CSRCertificate)(nil)

// NewCSRCertificate validates cfg and loads the certificate kept in
// cfg.Dir, if any is there and still valid. It does not contact the API
// server: call RotateIfDue or Run.
func NewCSRCertificate(cfg CSRConfig) (*CSRCertificate, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("server: CSRConfig.Client is nil")
	case cfg.NodeName == "":
		return nil, errors.New("server: CSRConfig.NodeName is empty")
	case len(cfg.IPs) == 0 && len(cfg.DNSNames) == 0:
		return nil, errors.New("server: CSRConfig needs at least one of IPs and DNSNames")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Jitter == nil {
		cfg.Jitter = func() float64 { return 0.5 }
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = defaultCSRWaitTimeout
	}
	c := &CSRCertificate{cfg: cfg}
	if cfg.Metrics != nil {
		m, err := registerCSRMetrics(cfg.Metrics, c.Current, cfg.Clock)
		if err != nil {
			return nil, err
		}
		c.metrics = m
	}
	if cfg.Dir != "" {
		data, err := os.ReadFile(filepath.Join(cfg.Dir, CurrentServingCertFile))
		if err == nil {
			if pair, err := parsePair(data); err == nil && cfg.Clock.Now().Before(pair.Leaf.NotAfter) {
				c.install(pair)
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("server: read kept serving certificate: %w", err)
		}
	}
	return c, nil
}

// GetCertificate returns the current certificate, or an error while none
// has been issued yet.
func (c *CSRCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := c.Current(); cert != nil {
		return cert, nil
	}
	return nil, errors.New("no serving certificate available for the node yet: its CSR is not issued")
}

// Current returns the certificate in use, nil before the first is issued.
// The caller must not modify it.
func (c *CSRCertificate) Current() *tls.Certificate {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert
}

// NextRotation is when a new certificate is due; zero when there is none.
func (c *CSRCertificate) NextRotation() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.deadline
}

func (c *CSRCertificate) install(pair *tls.Certificate) {
	nb, na := pair.Leaf.NotBefore, pair.Leaf.NotAfter
	life := na.Sub(nb)
	deadline := nb.Add(life*7/10 + time.Duration(c.cfg.Jitter()*float64(life/5)))
	c.mu.Lock()
	old := c.cert
	c.cert, c.deadline = pair, deadline
	c.mu.Unlock()
	if old != nil && old.Leaf != nil && c.metrics != nil {
		c.metrics.rotationAge.Observe(c.cfg.Clock.Now().Sub(old.Leaf.NotBefore).Seconds())
	}
}

// RotateIfDue requests a new certificate when there is none or the
// current one is due, and blocks until it is issued (or denied, or ctx
// ends, or WaitTimeout passes). It reports whether it installed one.
func (c *CSRCertificate) RotateIfDue(ctx context.Context) (bool, error) {
	if cert, due := c.Current(), c.NextRotation(); cert != nil && c.cfg.Clock.Now().Before(due) {
		return false, nil
	}
	if err := c.Rotate(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// Rotate requests a new certificate now with a fresh key and blocks until
// it is issued, then serves it (new handshakes use it at once) and keeps
// it in Dir. The current certificate stays in use if this fails, and the
// failure counts in kubelet_server_expiration_renew_errors.
func (c *CSRCertificate) Rotate(ctx context.Context) error {
	err := c.rotate(ctx)
	if err != nil && c.metrics != nil && ctx.Err() == nil {
		c.metrics.renewErrors.Inc()
	}
	return err
}

func (c *CSRCertificate) rotate(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("server: serving key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + c.cfg.NodeName, Organization: []string{"system:nodes"}},
		DNSNames:    c.cfg.DNSNames,
		IPAddresses: c.cfg.IPs,
	}, key)
	if err != nil {
		return fmt.Errorf("server: serving CSR: %w", err)
	}
	req := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:           pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName:        KubeletServingSigner,
			Usages:            []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
			ExpirationSeconds: c.cfg.ExpirationSeconds,
		},
	}
	created, err := c.cfg.Client.Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("server: create serving CSR: %w", err)
	}
	logger.Info("Requested a serving certificate; waiting for approval", "csr", created.Name, "signer", KubeletServingSigner)
	certPEM, err := c.waitIssued(ctx, created.Name, created.UID)
	if err != nil {
		return fmt.Errorf("server: serving CSR %s: %w", created.Name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("server: encode serving key: %w", err)
	}
	pairPEM := append(bytes.Clone(certPEM), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
	pair, err := parsePair(pairPEM)
	if err != nil {
		return fmt.Errorf("server: serving CSR %s issued an unusable certificate: %w", created.Name, err)
	}
	if c.cfg.Dir != "" {
		if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
			return fmt.Errorf("server: keep serving certificate: %w", err)
		}
		if err := fsutil.WriteFileAtomic(filepath.Join(c.cfg.Dir, CurrentServingCertFile), pairPEM, 0o600); err != nil {
			return fmt.Errorf("server: keep serving certificate: %w", err)
		}
	}
	c.install(pair)
	logger.Info("Serving certificate issued", "csr", created.Name, "notAfter", pair.Leaf.NotAfter, "rotateAt", c.NextRotation())
	return nil
}

// waitIssued follows the CSR until it carries a certificate or is denied
// or failed.
func (c *CSRCertificate) waitIssued(ctx context.Context, name string, uid types.UID) ([]byte, error) {
	timeout := c.cfg.Clock.After(c.cfg.WaitTimeout)
	for {
		csr, err := c.cfg.Client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if done, cert, err := issued(csr, uid); done {
			return cert, err
		}
		w, err := c.cfg.Client.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
			ResourceVersion: csr.ResourceVersion,
		})
		if err != nil {
			return nil, err
		}
		cert, done, err := c.follow(ctx, w, name, uid, timeout)
		w.Stop()
		if done {
			return cert, err
		}
	}
}

// follow reads one watch until the CSR is decided (done) or the watch
// ends (not done: the caller re-reads and watches again).
func (c *CSRCertificate) follow(ctx context.Context, w watch.Interface, name string, uid types.UID, timeout <-chan time.Time) ([]byte, bool, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, true, ctx.Err()
		case <-timeout:
			return nil, true, fmt.Errorf("not issued within %v (is anyone approving %s CSRs?)", c.cfg.WaitTimeout, KubeletServingSigner)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, false, nil
			}
			csr, isCSR := ev.Object.(*certificatesv1.CertificateSigningRequest)
			if !isCSR || csr.Name != name {
				continue
			}
			if ev.Type == watch.Deleted {
				return nil, true, errors.New("deleted before it was issued")
			}
			if done, cert, err := issued(csr, uid); done {
				return cert, true, err
			}
		}
	}
}

// issued reports whether a CSR is decided: issued (its certificate),
// denied or failed (an error).
func issued(csr *certificatesv1.CertificateSigningRequest, uid types.UID) (bool, []byte, error) {
	if csr.UID != uid {
		return true, nil, errors.New("was replaced by another request of the same name")
	}
	approved := false
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateDenied:
			return true, nil, fmt.Errorf("denied: %s: %s", c.Reason, c.Message)
		case certificatesv1.CertificateFailed:
			return true, nil, fmt.Errorf("failed: %s: %s", c.Reason, c.Message)
		case certificatesv1.CertificateApproved:
			approved = true
		}
	}
	if approved && len(csr.Status.Certificate) > 0 {
		return true, csr.Status.Certificate, nil
	}
	return false, nil, nil
}

// Run keeps a valid certificate in place until ctx ends: it requests one
// when none is there or the current one is due, retrying failures with
// exponential back-off (2s up to 5m), and otherwise sleeps until the next
// rotation. It returns nil when ctx ends.
func (c *CSRCertificate) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	retry := csrRetryMin
	for {
		_, err := c.RotateIfDue(ctx)
		var wait time.Duration
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			logger.Error(err, "Serving certificate rotation failed; retrying", "in", retry)
			wait, retry = retry, min(2*retry, csrRetryMax)
		} else {
			retry = csrRetryMin
			wait = c.NextRotation().Sub(c.cfg.Clock.Now())
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-c.cfg.Clock.After(wait):
			}
		}
	}
}

// parsePair reads a PEM bundle of certificates (leaf first) and a key.
func parsePair(data []byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(data, data)
	if err != nil {
		return nil, err
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &pair, nil
}
