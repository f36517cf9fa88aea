package bootstrap

import (
	"crypto/x509"
	"errors"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/kubeclient"
)

const (
	// SignerName is the signer of kubelet client certificates.
	SignerName = certificatesv1.KubeAPIServerClientKubeletSignerName
	// PairName prefixes the files the certificate store keeps in
	// Config.CertDir: kubelet-client-<time>.pem for each issued pair and
	// the symlink kubelet-client-current.pem to the one in use.
	PairName = "kubelet-client"
	// CurrentFile is the symlink, under Config.CertDir, to the certificate
	// and key (one PEM file) in use; the written kubeconfig points at it.
	CurrentFile = PairName + "-current.pem"

	// pendingKeyFile keeps the key of a request in flight across restarts,
	// so a restarted agent picks up the same request, as upstream does.
	pendingKeyFile = PairName + ".key.tmp"

	// defaultWaitTimeout is upstream kubelet's bound on the wait for the
	// bootstrap certificate.
	defaultWaitTimeout = time.Hour
	// lookupTimeout bounds the read of a request that is not issued, to
	// say why.
	lookupTimeout = 30 * time.Second
)

// NewClientFunc builds the API client certificates are requested with.
type NewClientFunc func(*rest.Config) (kubeclient.Interface, error)

// Config configures LoadClientConfig and NewRotator.
type Config struct {
	// Kubeconfig is the node's kubeconfig (kubelet's --kubeconfig). It is
	// used as it is while its client certificate is valid; otherwise it is
	// (re)written pointing at CertDir/kubelet-client-current.pem. Required.
	Kubeconfig string
	// BootstrapKubeconfig (kubelet's --bootstrap-kubeconfig) holds the
	// credentials, typically a bootstrap token, that request the first
	// client certificate, and a new one after the current one expired.
	// Empty: no bootstrap, Kubeconfig must exist and is used as it is.
	BootstrapKubeconfig string
	// CertDir keeps the issued certificates and keys (kubelet's
	// --cert-dir). Required with BootstrapKubeconfig and for NewRotator.
	CertDir string
	// NodeName is the node whose identity, system:node:NAME in group
	// system:nodes, is requested. Required with BootstrapKubeconfig and for
	// NewRotator.
	NodeName string
	// WaitTimeout bounds the wait for a bootstrap request to be approved
	// and issued. Default 1 hour, as upstream.
	WaitTimeout time.Duration
	// Clock decides whether certificates have expired, times WaitTimeout,
	// schedules a Rotator's renewals and back-off, and names the stored
	// files. Default the real clock.
	Clock clock.Clock
	// NewClient builds the API client requests are made with. Default
	// kubeclient.New; tests pass a fake (clientgo.Wrap of a fake
	// clientset).
	NewClient NewClientFunc
	// ExitAfter is how long a Rotator's Run goes on without a valid
	// client certificate, the API server answering, before it returns
	// ErrNoValidCertificate. Default 5 minutes, as kubelet's exit; a
	// negative value: never.
	ExitAfter time.Duration
	// OnRotate, if set, is called by a Rotator after it installed a new
	// certificate (leaf given), once connections with the old one are
	// closed. It must not block.
	OnRotate func(leaf *x509.Certificate)
}

func (c Config) withDefaults() Config {
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = defaultWaitTimeout
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.ExitAfter == 0 {
		c.ExitAfter = defaultExitAfter
	}
	if c.NewClient == nil {
		c.NewClient = func(rc *rest.Config) (kubeclient.Interface, error) { return kubeclient.New(rc, nil) }
	}
	return c
}

// needIdentity checks the fields needed to request certificates.
func (c Config) needIdentity(what string) error {
	switch {
	case c.CertDir == "":
		return errors.New("bootstrap: Config.CertDir is empty (" + what + ")")
	case c.NodeName == "":
		return errors.New("bootstrap: Config.NodeName is empty (" + what + ")")
	}
	return nil
}
