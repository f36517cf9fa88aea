package bootstrap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/certstore"
	"github.com/nodekit/nodekit/internal/fsutil"
)

// LoadClientConfig returns the node's client config, bootstrapping its
// identity first when needed, as upstream kubelet's --bootstrap-kubeconfig:
//
//   - without BootstrapKubeconfig, Kubeconfig is loaded as it is;
//   - if Kubeconfig exists and its client certificate is not expired, it is
//     used and nothing is requested;
//   - otherwise a CertificateSigningRequest for system:node:NAME (group
//     system:nodes, signer kubernetes.io/kube-apiserver-client-kubelet) is
//     made with the bootstrap credentials, and once it is approved and
//     issued (within WaitTimeout) the pair is stored in CertDir and
//     Kubeconfig is written: the bootstrap kubeconfig's server and CA,
//     client-certificate and client-key CertDir/kubelet-client-current.pem.
//
// The returned config reads the certificate files, which client-go
// reloads every few minutes; for renewal without restarts use NewRotator.
// Errors name the file, server or request at fault.
func LoadClientConfig(ctx context.Context, cfg Config) (*rest.Config, error) {
	logger := klog.FromContext(ctx)
	cfg = cfg.withDefaults()
	if cfg.Kubeconfig == "" {
		return nil, errors.New("bootstrap: Config.Kubeconfig is empty")
	}
	if cfg.BootstrapKubeconfig == "" {
		rc, err := loadKubeconfig(cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: kubeconfig: %w", err)
		}
		return rc, nil
	}
	if err := cfg.needIdentity("needed with BootstrapKubeconfig"); err != nil {
		return nil, err
	}

	why, err := certificateProblem(cfg.Kubeconfig, cfg.Clock.Now())
	if err != nil {
		return nil, fmt.Errorf("bootstrap: kubeconfig: %w", err)
	}
	if why == "" {
		logger.V(2).Info("Kubeconfig has a valid client certificate; no bootstrap needed", "kubeconfig", cfg.Kubeconfig)
		rc, err := loadKubeconfig(cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: kubeconfig: %w", err)
		}
		return rc, nil
	}
	logger.Info("Requesting a client certificate with the bootstrap kubeconfig", "reason", why, "bootstrapKubeconfig", cfg.BootstrapKubeconfig)

	boot, err := loadKubeconfig(cfg.BootstrapKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: bootstrap kubeconfig: %w", err)
	}
	client, err := cfg.NewClient(boot)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: client for %s (bootstrap kubeconfig %s): %w", boot.Host, cfg.BootstrapKubeconfig, err)
	}
	store, err := newStore(ctx, cfg, "", "")
	if err != nil {
		return nil, err
	}
	req := requester{client: client, server: boot.Host, nodeName: cfg.NodeName, timeout: cfg.WaitTimeout, clock: cfg.Clock}
	keyFile := filepath.Join(cfg.CertDir, pendingKeyFile)
	certPEM, keyPEM, err := req.request(ctx, keyFile)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: client certificate from %s (bootstrap kubeconfig %s): %w", boot.Host, cfg.BootstrapKubeconfig, err)
	}
	if _, err := store.Update(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("bootstrap: store client certificate in %s: %w", cfg.CertDir, err)
	}
	if err := os.Remove(keyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		logger.Error(err, "Could not remove the key of the finished request", "path", keyFile)
	}
	if err := writeKubeconfig(cfg.Kubeconfig, boot, store.CurrentPath()); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	logger.Info("Client certificate issued; kubeconfig written", "kubeconfig", cfg.Kubeconfig, "certificate", store.CurrentPath())
	rc, err := loadKubeconfig(cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: kubeconfig: %w", err)
	}
	return rc, nil
}

// newStore opens the store of the kubelet-client pair in cfg.CertDir,
// laid out as kubelet lays it out (see internal/certstore); certFile and
// keyFile are a pair to fall back on while it holds none.
func newStore(ctx context.Context, cfg Config, certFile, keyFile string) (*certstore.Store, error) {
	store, err := certstore.Open(PairName, cfg.CertDir, certstore.Options{
		CertFile: certFile, KeyFile: keyFile, Clock: cfg.Clock, Logger: klog.FromContext(ctx).V(3),
	})
	if err != nil {
		return nil, fmt.Errorf("bootstrap: certificate store in %s: %w", cfg.CertDir, err)
	}
	return store, nil
}

// loadKubeconfig reads a kubeconfig file into a client config; relative
// paths in it are resolved against its directory.
func loadKubeconfig(path string) (*rest.Config, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s does not exist", path)
		}
		return nil, err
	}
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rc, nil
}

// certificateProblem says why the kubeconfig at path cannot be used as it
// is: missing, unreadable, without a client certificate, a certificate not
// matching its key, or expired at now. "" means it can. Only a file that
// exists but cannot be examined is an error.
func certificateProblem(path string, now time.Time) (string, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return path + " does not exist", nil
		}
		return "", err
	}
	rc, err := loadKubeconfig(path)
	if err != nil {
		return fmt.Sprintf("%s cannot be loaded: %v", path, err), nil
	}
	certPEM, keyPEM := rc.CertData, rc.KeyData
	if len(certPEM) == 0 && rc.CertFile != "" {
		if certPEM, err = os.ReadFile(rc.CertFile); err != nil {
			return fmt.Sprintf("client certificate of %s: %v", path, err), nil
		}
	}
	if len(keyPEM) == 0 && rc.KeyFile != "" {
		if keyPEM, err = os.ReadFile(rc.KeyFile); err != nil {
			return fmt.Sprintf("client key of %s: %v", path, err), nil
		}
	}
	if len(certPEM) == 0 {
		return path + " has no client certificate", nil
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return fmt.Sprintf("client certificate of %s: %v", path, err), nil
	}
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return fmt.Sprintf("client certificate of %s: %v", path, err), nil
	}
	for _, c := range certs {
		if now.After(c.NotAfter) {
			return fmt.Sprintf("client certificate of %s (%s) expired at %s", path, c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339)), nil
		}
	}
	return "", nil
}

// writeKubeconfig writes the node's kubeconfig: the cluster of the
// bootstrap config, the pair at pemPath as credentials.
func writeKubeconfig(path string, boot *rest.Config, pemPath string) error {
	cluster := &clientcmdapi.Cluster{
		Server:                boot.Host,
		InsecureSkipTLSVerify: boot.Insecure,
		TLSServerName:         boot.ServerName,
		CertificateAuthority:  boot.CAFile,
	}
	if boot.CAFile == "" {
		cluster.CertificateAuthorityData = boot.CAData
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["default-cluster"] = cluster
	kc.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: pemPath, ClientKey: pemPath}
	kc.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default"}
	kc.CurrentContext = "default-context"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return fmt.Errorf("encode kubeconfig %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := fsutil.WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}
