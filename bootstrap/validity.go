package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/clockwait"
)

const (
	// defaultExitAfter is how long kubelet goes on without a valid
	// client certificate, the API server answering, before it exits.
	defaultExitAfter = 5 * time.Minute
	// validityCheckPeriod is how often upstream looks.
	validityCheckPeriod = 10 * time.Second
)

// ErrNoValidCertificate is what Rotator.Run returns (wrapped, with the
// time the last valid certificate was seen) when the node has been
// without a valid client certificate for Config.ExitAfter while the API
// server answered its certificate requests.
var ErrNoValidCertificate = errors.New("no valid client certificate and the API server is responsive")

// noteServerError records what a failed certificate request says about
// the API server, as upstream's manager: responsive if it refused the
// request as Unauthorized, Forbidden or NotFound, not if it failed with
// an unexpected server error (a proxy's or load balancer's, more likely
// than the API server's) or anything else.
func (r *Rotator) noteServerError(err error) {
	switch {
	case apierrors.IsUnauthorized(err):
		r.serverHealthy.Store(true)
	case apierrors.IsUnexpectedServerError(err):
		r.serverHealthy.Store(false)
	default:
		r.serverHealthy.Store(apierrors.IsNotFound(err) || apierrors.IsForbidden(err))
	}
}

// watchValidity checks every validityCheckPeriod whether the node has a
// valid certificate. Once it has had none for longer than exitAfter and
// the API server is responsive (a certificate was issued, or a request
// was refused: noteServerError), it stops Run with ErrNoValidCertificate,
// as kubelet exits, so that its supervisor can start it again with
// fresh bootstrap credentials. With the server unresponsive it only logs.
func (r *Rotator) watchValidity(ctx context.Context, exitAfter time.Duration, stop context.CancelCauseFunc) {
	logger := klog.FromContext(ctx)
	lastValid := r.cfg.Clock.Now()
	for clockwait.Sleep(ctx, r.cfg.Clock, validityCheckPeriod) {
		now := r.cfg.Clock.Now()
		if r.Current() != nil {
			lastValid = now
			continue
		}
		if !now.After(lastValid.Add(exitAfter)) {
			continue
		}
		if r.serverHealthy.Load() {
			logger.Error(nil, "No valid client certificate is found and the server is responsive, stopping", "lastCertificateAvailabilityTime", lastValid, "shutdownThreshold", exitAfter)
			stop(fmt.Errorf("bootstrap: %w (last valid at %s, threshold %s)", ErrNoValidCertificate, lastValid.UTC().Format(time.RFC3339), exitAfter))
			return
		}
		logger.Error(nil, "No valid client certificate is found but the server is not responsive. A restart may be necessary to retrieve new initial credentials", "lastCertificateAvailabilityTime", lastValid, "shutdownThreshold", exitAfter)
	}
}
