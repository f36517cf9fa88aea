package bootstrap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/certstore"
	"github.com/nodekit/nodekit/internal/clockwait"
	"github.com/nodekit/nodekit/kubeclient"
)

// Rotator keeps the node's client certificate renewed, as upstream
// kubelet's rotateCertificates: it requests a new certificate (fresh
// ECDSA P-256 key, same identity, signer
// kubernetes.io/kube-apiserver-client-kubelet) at a jittered 70-90% of
// the current one's lifetime, with the node's current credentials,
// falling back to the bootstrap kubeconfig once the certificate has
// expired. New pairs go to CertDir (kubelet-client-current.pem follows
// them, so the kubeconfig LoadClientConfig wrote stays right across
// restarts). Renewal runs on Config.Clock.
//
// ClientConfig is the config to build the agent's clients from: its
// TLS handshakes present the current certificate, and when a new one is
// installed every connection is closed so that requests, watches
// included, reconnect with it at once.
type Rotator struct {
	cfg     Config
	store   *certstore.Store
	dialer  *connrotation.Dialer
	client  *rest.Config
	logger  klog.Logger
	started atomic.Bool
	// renewErrors is kubelet_certificate_manager_client_expiration_renew_errors,
	// counting each failed renewal attempt; RegisterMetrics exposes it.
	renewErrors prometheus.Counter
	// force makes the first renewal immediate: no usable certificate in
	// CertDir, or one taken over from inline data. Read by Run only.
	force bool
	// serverHealthy is upstream's "server healthy": set once a
	// certificate is issued, and by each failed request as the failure
	// says (noteServerError). Unset at first.
	serverHealthy atomic.Bool

	mu   sync.RWMutex
	cert *tls.Certificate
}

// NewRotator prepares rotation of the certificate in cfg.CertDir for a
// node whose client config is current (LoadClientConfig's result: its
// server, CA and client settings are kept; its credentials give way to
// the current certificate). If CertDir holds no certificate yet, the one
// current points at (files or inline data) is taken over and, if inline,
// replaced at once. It reads files but does not contact the API server:
// call Run.
func NewRotator(ctx context.Context, cfg Config, current *rest.Config) (*Rotator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.needIdentity("needed for rotation"); err != nil {
		return nil, err
	}
	if current == nil {
		return nil, errors.New("bootstrap: NewRotator: current client config is nil")
	}
	r := &Rotator{cfg: cfg, logger: klog.FromContext(ctx), renewErrors: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kubelet_certificate_manager_client_expiration_renew_errors",
		Help: "[ALPHA] Counter of certificate renewal errors.",
	})}
	if err := r.buildClientConfig(current); err != nil {
		return nil, err
	}
	var err error
	if r.store, err = newStore(ctx, cfg, current.CertFile, current.KeyFile); err != nil {
		return nil, err
	}
	if err := r.loadInitial(current); err != nil {
		return nil, fmt.Errorf("bootstrap: current client certificate in %s: %w", cfg.CertDir, err)
	}
	return r, nil
}

// loadInitial picks the certificate to start from, as upstream's manager:
// the store's while it is valid; else a pair given inline in current
// (kubeadm's control-plane nodes), stored and rotated out at once; else
// the store's expired one or none, renewed at once.
func (r *Rotator) loadInitial(current *rest.Config) error {
	pair, err := r.store.Current()
	if err != nil && !errors.As(err, new(*certstore.NoCertKeyError)) {
		return err
	}
	if err == nil && r.cfg.Clock.Now().Before(pair.Leaf.NotAfter) {
		r.cert = pair
		return nil
	}
	r.cert, r.force = pair, true
	if len(current.CertData) == 0 || len(current.KeyData) == 0 {
		return nil
	}
	inline, err := tls.X509KeyPair(current.CertData, current.KeyData)
	if err != nil {
		return fmt.Errorf("inline client certificate of the client config: %w", err)
	}
	if inline.Leaf == nil {
		if inline.Leaf, err = x509.ParseCertificate(inline.Certificate[0]); err != nil {
			return fmt.Errorf("inline client certificate of the client config: %w", err)
		}
	}
	r.cert = &inline
	if _, err := r.store.Update(current.CertData, current.KeyData); err != nil {
		r.logger.Error(err, "Could not store the inline client certificate", "certDir", r.cfg.CertDir)
	}
	return nil
}

// buildClientConfig makes the config whose transport presents the
// current certificate through a dialer that can close every connection.
func (r *Rotator) buildClientConfig(current *rest.Config) error {
	rc := rest.AnonymousClientConfig(current)
	tlsConfig, err := rest.TLSConfigFor(rc)
	if err != nil {
		return fmt.Errorf("bootstrap: TLS settings of %s: %w", rc.Host, err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{}
	}
	tlsConfig.Certificates = nil
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if c := r.Current(); c != nil {
			return c, nil
		}
		return &tls.Certificate{}, nil // none yet: the handshake goes on without one
	}
	dial := rc.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	r.dialer = connrotation.NewDialer(dial)
	proxy := rc.Proxy
	if proxy == nil {
		proxy = http.ProxyFromEnvironment
	}
	rc.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               proxy,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         r.dialer.DialContext,
	})
	// The transport holds the TLS settings; client-go refuses both.
	rc.TLSClientConfig = rest.TLSClientConfig{}
	rc.Dial, rc.Proxy = nil, nil
	r.client = rc
	return nil
}

// ClientConfig returns a config presenting the current client
// certificate; clients built from it follow rotations without a
// restart. Each call returns a copy sharing one transport; set QPS, Burst,
// UserAgent and such on it, but no TLS settings.
func (r *Rotator) ClientConfig() *rest.Config {
	return rest.CopyConfig(r.client)
}

// Current returns the certificate in use, nil when there is none or it
// has expired. The caller must not modify it.
func (r *Rotator) Current() *tls.Certificate {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.cert == nil || (r.cert.Leaf != nil && r.cfg.Clock.Now().After(r.cert.Leaf.NotAfter)) {
		return nil
	}
	return r.cert
}

// CloseConnections closes every connection of ClientConfig's transport,
// e.g. after failed heartbeats, so the next requests dial afresh.
func (r *Rotator) CloseConnections() { r.dialer.CloseAll() }

// Run renews the certificate until ctx ends, then returns nil. Failed
// renewals are logged, counted and retried with back-off (see renew).
// While the certificate is expired, Current is nil, handshakes go on
// without a client certificate and renewals use the bootstrap
// kubeconfig. As kubelet, once that has lasted Config.ExitAfter and the
// API server is responsive, Run returns an error wrapping
// ErrNoValidCertificate: the agent should exit, so that its supervisor
// starts it again with fresh bootstrap credentials. Run can be called
// once.
func (r *Rotator) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("bootstrap: Rotator.Run called more than once")
	}
	ctx, stop := context.WithCancelCause(ctx)
	var checks sync.WaitGroup
	if r.cfg.ExitAfter > 0 {
		checks.Go(func() { r.watchValidity(ctx, r.cfg.ExitAfter, stop) })
	}
	r.rotate(ctx) // returns when ctx ends, by the caller or the check
	cause := context.Cause(ctx)
	stop(nil)
	checks.Wait()
	if errors.Is(cause, ErrNoValidCertificate) {
		return cause
	}
	return nil
}

// rotate renews the certificate at each deadline until ctx ends.
func (r *Rotator) rotate(ctx context.Context) {
	logger := klog.FromContext(ctx)
	logger.Info("Starting client certificate rotation", "certDir", r.cfg.CertDir)
	for {
		deadline := r.nextDeadline()
		if wait := deadline.Sub(r.cfg.Clock.Now()); wait > 0 {
			logger.V(2).Info("Waiting for the next client certificate rotation", "deadline", deadline, "wait", wait)
			if !clockwait.Sleep(ctx, r.cfg.Clock, wait) {
				return
			}
		}
		if !r.renew(ctx) {
			return
		}
		// Upstream's loop pauses a second before it looks at the new
		// certificate's deadline.
		if !clockwait.Sleep(ctx, r.cfg.Clock, time.Second) {
			return
		}
	}
}

// clientFor is the client renewals are made with: the current
// certificate while it is valid, else the bootstrap credentials.
func (r *Rotator) clientFor(current *tls.Certificate) (kubeclient.Interface, error) {
	if current != nil {
		return r.cfg.NewClient(r.ClientConfig())
	}
	if r.cfg.BootstrapKubeconfig == "" {
		return nil, errors.New("bootstrap: no valid client certificate to request a new one with, and no bootstrap kubeconfig")
	}
	boot, err := loadKubeconfig(r.cfg.BootstrapKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: bootstrap kubeconfig: %w", err)
	}
	return r.cfg.NewClient(boot)
}

// install makes pair current and closes the connections made with the
// previous one.
func (r *Rotator) install(pair *tls.Certificate) {
	r.mu.Lock()
	r.cert = pair
	r.mu.Unlock()
	r.serverHealthy.Store(true)
	r.dialer.CloseAll()
	r.logger.Info("Client certificate rotated; reconnecting with it", "subject", pair.Leaf.Subject.CommonName, "notAfter", pair.Leaf.NotAfter)
	if r.cfg.OnRotate != nil {
		r.cfg.OnRotate(pair.Leaf)
	}
}

// RegisterMetrics registers upstream kubelet's
// kubelet_certificate_manager_client_expiration_renew_errors in reg: the
// renewals of the client certificate that failed.
func (r *Rotator) RegisterMetrics(reg prometheus.Registerer) error {
	if err := reg.Register(r.renewErrors); err != nil {
		return fmt.Errorf("bootstrap: register client certificate metrics: %w", err)
	}
	return nil
}
