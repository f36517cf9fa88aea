// Package bootstrap owns the node agent's client identity: TLS bootstrap
// and rotation of its client certificate, as upstream kubelet's
// --bootstrap-kubeconfig, --cert-dir and rotateCertificates.
//
// LoadClientConfig runs before any API client is built. While the
// kubeconfig holds a valid client certificate it just loads it; otherwise
// it asks for one with the bootstrap credentials (a
// CertificateSigningRequest for system:node:NAME in group system:nodes,
// signer kubernetes.io/kube-apiserver-client-kubelet, usages digital
// signature and client auth, plus key encipherment for RSA keys), waits a
// bounded time for approval and issuance, keeps the pair in the cert dir
// (laid out as kubelet lays it out, see internal/certstore: one PEM file
// kubelet-client-<time>.pem, certificate then key, and the symlink
// kubelet-client-current.pem) and writes the kubeconfig pointing at it.
// Errors name the file, server or request and say what is missing: "not
// approved", "denied: reason", "no certificate issued within ...".
//
// A Rotator renews the certificate before it expires (as upstream's
// certificate manager: at a jittered 70-90% of its lifetime, with the
// node's current certificate, or the bootstrap credentials once it has
// expired; failed attempts are retried after 2, 4, 8 and 16 s, then every
// 32 s) and hands out a client config whose connections present the
// current certificate and are closed when a new one is installed, so the
// agent's clients follow rotations without a restart. As kubelet, a
// Rotator that has had no valid certificate for five minutes
// (Config.ExitAfter) while the API server answered its requests stops
// with ErrNoValidCertificate, for the agent to exit and be started again.
//
// Requests are made with a kubeclient.Interface (Config.NewClient,
// kubeclient.New by default), so the package does not link client-go's
// clientset, nor its certificate manager and CSR helpers.
//
// The package does not approve or sign requests (kube-controller-manager
// does), does not handle the serving certificate of the node API (see
// server.CSRCertificate) and does not retry a failed bootstrap: the agent
// exits and its supervisor restarts it, as for kubelet.
//
//	cfg := bootstrap.Config{
//		BootstrapKubeconfig: "/etc/kubernetes/bootstrap-kubelet.conf",
//		Kubeconfig:          "/etc/kubernetes/kubelet.conf",
//		CertDir:             "/var/lib/kubelet/pki",
//		NodeName:            nodeName,
//	}
//	rc, err := bootstrap.LoadClientConfig(ctx, cfg) // blocks until issued
//	if rotateCertificates {
//		rot, err := bootstrap.NewRotator(ctx, cfg, rc)
//		rc = rot.ClientConfig()
//		go rot.Run(ctx)
//	}
//	client, err := kubeclient.New(rc, nil)
package bootstrap
