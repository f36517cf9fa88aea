package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodekit/nodekit/bootstrap"
)

// clientConfig is the node's API client configuration: --kubeconfig as
// it is, or, with --bootstrap-kubeconfig, a client certificate requested
// through a CSR when --kubeconfig has no valid one (written then), as
// upstream's TLS bootstrap. With rotateCertificates the certificate is
// renewed before it expires and the clients follow without a restart.
func (a *agent) clientConfig(ctx context.Context, o *options) (*rest.Config, error) {
	if o.bootstrapKubeconfig == "" {
		rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		return rc, nil
	}
	if o.kubeconfig == "" {
		return nil, errors.New("--bootstrap-kubeconfig needs --kubeconfig (the file to write)")
	}
	certDir := o.certDir
	if certDir == "" {
		certDir = filepath.Join(o.rootDir, "pki")
	}
	bcfg := bootstrap.Config{BootstrapKubeconfig: o.bootstrapKubeconfig, Kubeconfig: o.kubeconfig, CertDir: certDir, NodeName: a.nodeName}
	rc, err := bootstrap.LoadClientConfig(ctx, bcfg) // waits for the CSR to be approved and signed
	if err != nil {
		return nil, fmt.Errorf("--bootstrap-kubeconfig: %w", err)
	}
	if a.cfg.RotateCertificates {
		if a.certRotator, err = bootstrap.NewRotator(ctx, bcfg, rc); err != nil {
			return nil, fmt.Errorf("rotateCertificates: %w", err)
		}
		rc = a.certRotator.ClientConfig()
	}
	return rc, nil
}
