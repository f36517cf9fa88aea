package bootstrap

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/clockwait"
)

// The timing of renewals, as upstream's certificate manager.
const (
	// renewalWaitTimeout bounds the wait for one renewal request to be
	// approved and issued.
	renewalWaitTimeout = 15 * time.Minute
	// The first attempts of a renewal are spaced by a doubling delay
	// from firstRetryDelay, up to renewalAttempts attempts; then an
	// attempt every slowRetryDelay until one succeeds.
	firstRetryDelay = 2 * time.Second
	renewalAttempts = 5
	slowRetryDelay  = 32 * time.Second
	// retryJitter adds up to this fraction to each fast retry delay.
	retryJitter = 0.1
)

// rotationDeadline is when leaf is due for renewal: NotBefore plus
// between 70% and 90% of its lifetime, u in [0,1) choosing where.
func rotationDeadline(leaf *x509.Certificate, u float64) time.Time {
	total := float64(leaf.NotAfter.Sub(leaf.NotBefore))
	return leaf.NotBefore.Add(time.Duration(total * (0.7 + 0.2*u)))
}

// nextDeadline is when Run renews next: now when it must (no certificate,
// one taken over, or one not of this node's identity), else the jittered
// rotationDeadline of the current one.
func (r *Rotator) nextDeadline() time.Time {
	now := r.cfg.Clock.Now()
	if r.force {
		r.force = false
		return now
	}
	r.mu.RLock()
	cert := r.cert
	r.mu.RUnlock()
	if cert == nil || cert.Leaf == nil || !hasIdentity(cert.Leaf, r.cfg.NodeName) {
		return now
	}
	return rotationDeadline(cert.Leaf, mathrand.Float64())
}

// hasIdentity says whether leaf is node's client certificate: its common
// name, and every organization of the identity among its own.
func hasIdentity(leaf *x509.Certificate, node string) bool {
	want := nodeSubject(node)
	if leaf.Subject.CommonName != want.CommonName {
		return false
	}
	for _, o := range want.Organization {
		if !slices.Contains(leaf.Subject.Organization, o) {
			return false
		}
	}
	return true
}

// renew gets a new certificate, retrying failed attempts after 2, 4, 8
// and 16 s (each up to 10% longer), then every 32 s, until one succeeds
// (true) or ctx ends (false).
func (r *Rotator) renew(ctx context.Context) bool {
	delay := firstRetryDelay
	for attempt := 1; ; attempt++ {
		err := r.renewOnce(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		r.renewErrors.Inc()
		wait := slowRetryDelay
		if attempt < renewalAttempts {
			wait = delay + time.Duration(mathrand.Float64()*retryJitter*float64(delay))
			delay *= 2
		}
		klog.FromContext(ctx).Error(err, "Client certificate renewal failed; trying again", "attempt", attempt, "retryIn", wait)
		if !clockwait.Sleep(ctx, r.cfg.Clock, wait) {
			return false
		}
	}
}

// renewOnce requests a certificate for a fresh key, waits for it at most
// renewalWaitTimeout, stores it and installs it.
func (r *Rotator) renewOnce(ctx context.Context) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	subject := nodeSubject(r.cfg.NodeName)
	csrPEM, err := certutil.MakeCSRFromTemplate(key, &x509.CertificateRequest{Subject: subject})
	if err != nil {
		return fmt.Errorf("make certificate request: %w", err)
	}
	client, err := r.clientFor(r.Current())
	if err != nil {
		return err
	}
	name, uid, err := createCSR(ctx, client, r.cfg.Clock, csrPEM, "", clientUsages(key), key)
	if err != nil {
		r.noteServerError(err)
		return err
	}
	waitCtx, cancel := withClockTimeout(ctx, r.cfg.Clock, renewalWaitTimeout)
	defer cancel()
	certPEM, err := waitForCSR(waitCtx, client, r.cfg.Clock, name, uid)
	if err != nil {
		return fmt.Errorf("CSR %s: %w", name, err)
	}
	pair, err := r.store.Update(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("store the certificate of CSR %s: %w", name, err)
	}
	r.install(pair)
	return nil
}

// errWaitTimeout is the cancellation cause of withClockTimeout.
var errWaitTimeout = errors.New("wait timeout")

// withClockTimeout is context.WithTimeout timed on clk: the context is
// cancelled with cause errWaitTimeout once d has passed on clk.
func withClockTimeout(ctx context.Context, clk clock.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	waitCtx, cancel := context.WithCancelCause(ctx)
	timer := clk.NewTimer(d)
	go func() {
		select {
		case <-timer.C():
			cancel(errWaitTimeout)
		case <-waitCtx.Done():
		}
	}()
	// Stopping the timer here, not in the goroutine, leaves no timer
	// behind on a fake clock once the caller is done.
	return waitCtx, func() { timer.Stop(); cancel(nil) }
}
