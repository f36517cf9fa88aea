package bootstrap

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/kubeclient"
)

// requester makes one node client certificate request and waits for it,
// bounded by timeout on clock.
type requester struct {
	client   kubeclient.Interface
	server   string
	nodeName string
	timeout  time.Duration
	clock    clock.Clock
}

// nodeSubject is the identity of node name's client certificate.
func nodeSubject(name string) pkix.Name {
	return pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}
}

// request returns an issued certificate and its key (PEM). The key is
// kept in keyFile (reused if there) until the caller stores the pair, so
// an agent restarted meanwhile finds its request again by name; a denied
// or failed request drops it, so the next attempt is a new request.
func (r requester) request(ctx context.Context, keyFile string) (certPEM, keyPEM []byte, err error) {
	keyPEM, _, err = keyutil.LoadOrGenerateKeyFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("key %s: %w", keyFile, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("key %s: %T cannot sign", keyFile, key)
	}
	subject := nodeSubject(r.nodeName)
	csrPEM, err := certutil.MakeCSR(key, &subject, nil, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("make certificate request: %w", err)
	}
	// ECDSA keys: digital signature + client auth; RSA adds key encipherment.
	usages := clientUsages(key)
	name, err := requestName(signer.Public(), subject, usages)
	if err != nil {
		return nil, nil, err
	}

	waitCtx, cancel := withClockTimeout(ctx, r.clock, r.timeout)
	defer cancel()

	reqName, uid, err := createCSR(waitCtx, r.client, r.clock, csrPEM, name, usages, signer)
	if err != nil {
		if errors.Is(context.Cause(waitCtx), errWaitTimeout) {
			return nil, nil, fmt.Errorf("CSR %s could not be created within %v: %w", name, r.timeout, err)
		}
		return nil, nil, err
	}
	klog.FromContext(ctx).Info("Requested a client certificate; waiting for approval", "csr", reqName, "signer", SignerName, "server", r.server)
	certPEM, err = waitForCSR(waitCtx, r.client, r.clock, reqName, uid)
	if err != nil {
		var denied *RequestDeniedError
		if errors.As(err, &denied) {
			_ = os.Remove(keyFile) // the next attempt is a new request
			return nil, nil, err
		}
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("CSR %s: %w", reqName, ctx.Err())
		}
		return nil, nil, r.explain(ctx, reqName, keyFile, errors.Is(context.Cause(waitCtx), errWaitTimeout), err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, nil, fmt.Errorf("CSR %s issued an unusable certificate: %w", reqName, err)
	}
	return certPEM, keyPEM, nil
}

// explain turns a failed wait for request name into an error saying what
// is missing: approval, issuance, or why it was denied or failed.
func (r requester) explain(ctx context.Context, name, keyFile string, timedOut bool, waitErr error) error {
	lookupCtx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	req, err := r.client.CertificatesV1().CertificateSigningRequests().Get(lookupCtx, name, metav1.GetOptions{})
	if err != nil {
		if timedOut {
			return fmt.Errorf("CSR %s: no certificate issued within %v (and reading it failed: %w)", name, r.timeout, err)
		}
		return fmt.Errorf("CSR %s: %w", name, waitErr)
	}
	approved := false
	for _, c := range req.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			_ = os.Remove(keyFile) // the next attempt is a new request
			verb := "denied"
			if c.Type == certificatesv1.CertificateFailed {
				verb = "failed"
			}
			return fmt.Errorf("CSR %s %s: %s: %s", name, verb, c.Reason, c.Message)
		case certificatesv1.CertificateApproved:
			approved = true
		}
	}
	switch {
	case !timedOut:
		return fmt.Errorf("CSR %s: %w", name, waitErr)
	case approved:
		return fmt.Errorf("CSR %s approved, but no certificate issued within %v: is a signer for %s running (kube-controller-manager with --cluster-signing-cert-file)?",
			name, r.timeout, SignerName)
	default:
		return fmt.Errorf("CSR %s not approved within %v, so no certificate was issued (kube-controller-manager approves %s requests of users bound to the cluster role system:certificates.k8s.io:certificatesigningrequests:nodeclient)",
			name, r.timeout, SignerName)
	}
}

// requestName derives the request's name from what it asks for, so the
// same key asking again (after a restart) finds its earlier request.
func requestName(pub crypto.PublicKey, subject pkix.Name, usages []certificatesv1.KeyUsage) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("encode public key: %w", err)
	}
	h := sha256.New()
	field := func(b []byte) { // length-prefixed: fields cannot run together
		_ = binary.Write(h, binary.BigEndian, uint32(len(b)))
		h.Write(b)
	}
	field(der)
	field([]byte(subject.CommonName))
	for _, o := range subject.Organization {
		field([]byte(o))
	}
	for _, u := range usages {
		field([]byte(u))
	}
	return "node-csr-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}
