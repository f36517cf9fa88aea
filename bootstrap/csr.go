package bootstrap

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"reflect"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/clockwait"
	"github.com/nodekit/nodekit/kubeclient"
)

// relistDelay is the pause before a failed list or a closed watch of a
// request is tried again.
const relistDelay = time.Second // as upstream's wait

// clientUsages are the usages of a node client certificate for key:
// digital signature and client auth, plus key encipherment for an RSA
// key (only RSA keys encrypt in a TLS key exchange), as upstream kubelet
// asks.
func clientUsages(key any) []certificatesv1.KeyUsage {
	if _, ok := key.(*rsa.PrivateKey); ok {
		return []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}
	}
	return []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
}

// RequestDeniedError is the error of a request the approver denied or
// the signer failed.
type RequestDeniedError struct {
	Name string
	// Failed is true for a Failed condition, false for Denied.
	Failed          bool
	Reason, Message string
}

func (e *RequestDeniedError) Error() string {
	verb := "denied"
	if e.Failed {
		verb = "failed"
	}
	return fmt.Sprintf("CSR %s %s: %s: %s", e.Name, verb, e.Reason, e.Message)
}

// createCSR creates a certificates/v1 request for csrPEM. With a name, a
// request of that name that exists already is taken over if it asks for
// the same subject and signer with key's public key (a restarted agent
// finding its own request); without, the server names it csr-XXXXX.
func createCSR(ctx context.Context, client kubeclient.Interface, clk clock.PassiveClock, csrPEM []byte, name string, usages []certificatesv1.KeyUsage, key crypto.Signer) (string, types.UID, error) {
	req := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: csrPEM, Usages: usages, SignerName: SignerName},
	}
	if name == "" {
		req.GenerateName = "csr-"
	}
	csrs := client.CertificatesV1().CertificateSigningRequests()
	created, err := csrs.Create(ctx, req, metav1.CreateOptions{})
	if err == nil {
		return created.Name, created.UID, nil
	}
	if !apierrors.IsAlreadyExists(err) || name == "" {
		return "", "", fmt.Errorf("create CSR: %w", err)
	}
	existing, err := csrs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("CSR %s exists but cannot be read: %w", name, err)
	}
	if err := sameRequest(existing, req, key, clk.Now()); err != nil {
		return "", "", fmt.Errorf("CSR %s exists and is not this node's request: %w", name, err)
	}
	klog.FromContext(ctx).Info("Found this node's certificate request from before; waiting for it", "csr", name)
	return existing.Name, existing.UID, nil
}

// sameRequest checks that found asks for what want asks for, signed with
// key, and that what was issued for it has not expired at now.
func sameRequest(found, want *certificatesv1.CertificateSigningRequest, key crypto.Signer, now time.Time) error {
	got, err := parseRequest(found.Spec.Request)
	if err != nil {
		return err
	}
	ours, err := parseRequest(want.Spec.Request)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(got.Subject, ours.Subject) {
		return fmt.Errorf("subject %v, want %v", got.Subject, ours.Subject)
	}
	if found.Spec.SignerName != "" && found.Spec.SignerName != want.Spec.SignerName {
		return fmt.Errorf("signer %s, want %s", found.Spec.SignerName, want.Spec.SignerName)
	}
	got.PublicKey = key.Public() // signed by our key?
	if err := got.CheckSignature(); err != nil {
		return fmt.Errorf("not signed with this key: %w", err)
	}
	if len(found.Status.Certificate) > 0 {
		certs, err := parseCertificates(found.Status.Certificate)
		if err != nil {
			return err
		}
		for _, c := range certs {
			if now.After(c.NotAfter) {
				return fmt.Errorf("its certificate expired at %s", c.NotAfter)
			}
		}
	}
	return nil
}

// parseRequest decodes a PEM certificate request.
func parseRequest(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("request is not a PEM CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// parseCertificates decodes the CERTIFICATE blocks of data.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("issued certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("issued certificate: no CERTIFICATE block")
	}
	return certs, nil
}

// csrOutcome says what a request's current state means: the issued
// certificate, an error ending the wait (denied, failed, replaced), or
// neither (keep waiting).
func csrOutcome(req *certificatesv1.CertificateSigningRequest, uid types.UID) ([]byte, error) {
	if req.UID != uid {
		return nil, fmt.Errorf("CSR %s was replaced (UID %s, want %s)", req.Name, req.UID, uid)
	}
	approved := false
	for _, c := range req.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			return nil, &RequestDeniedError{Name: req.Name, Failed: c.Type == certificatesv1.CertificateFailed, Reason: c.Reason, Message: c.Message}
		case certificatesv1.CertificateApproved:
			approved = true
		}
	}
	if approved && len(req.Status.Certificate) > 0 {
		return req.Status.Certificate, nil
	}
	return nil, nil
}

// waitForCSR waits until request name (of uid) is approved and issued and
// returns the certificate, or until it is denied, fails, is deleted or
// replaced, or ctx ends. It lists the request and watches it from the
// list's version, listing again (after relistDelay on clk) whenever a
// list fails or a watch ends.
func waitForCSR(ctx context.Context, client kubeclient.Interface, clk clock.Clock, name string, uid types.UID) ([]byte, error) {
	csrs := client.CertificatesV1().CertificateSigningRequests()
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	for {
		list, err := csrs.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err == nil {
			for i := range list.Items {
				if cert, err := csrOutcome(&list.Items[i], uid); cert != nil || err != nil {
					return cert, err
				}
			}
			if len(list.Items) == 0 {
				return nil, fmt.Errorf("CSR %s was deleted", name)
			}
			var w watch.Interface
			w, err = csrs.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
			if err == nil {
				if cert, done, err := watchCSR(ctx, w, name, uid); done {
					return cert, err
				}
			}
		}
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Reading the certificate request failed; trying again", "csr", name, "err", err)
		}
		if !clockwait.Sleep(ctx, clk, relistDelay) {
			return nil, ctx.Err()
		}
	}
}

// watchCSR follows w until the request's outcome is known (done) or the
// watch ends (not done: list again).
func watchCSR(ctx context.Context, w watch.Interface, name string, uid types.UID) (cert []byte, done bool, err error) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, true, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, false, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return nil, true, fmt.Errorf("CSR %s was deleted", name)
			case watch.Added, watch.Modified:
				req, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
				if !ok {
					return nil, true, fmt.Errorf("CSR %s: watch sent a %T", name, ev.Object)
				}
				if cert, err := csrOutcome(req, uid); cert != nil || err != nil {
					return cert, true, err
				}
			case watch.Error:
				return nil, false, nil // e.g. the version expired: list again
			}
		}
	}
}
