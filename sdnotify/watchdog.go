package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// MinWatchdogTimeout is the shortest watchdog timeout NewWatchdog takes:
// upstream refuses 1s or less.
const MinWatchdogTimeout = time.Second

// Retry of a failed send, as upstream: two more tries, 1s then 2s later.
const (
	retries    = 2
	firstRetry = time.Second
)

// WatchdogConfig configures a Watchdog.
type WatchdogConfig struct {
	// Notifier is where WATCHDOG=1 goes.
	Notifier *Notifier
	// Timeout is systemd's watchdog timeout (WatchdogTimeout); 0 is off.
	Timeout time.Duration
	// Check says whether the agent is healthy; nil is always healthy.
	// The watchdog is not petted while it fails.
	Check func() error
	// Clock paces the pets and retries; nil is the real clock.
	Clock clock.WithTicker
}

// Watchdog pets systemd's watchdog while the agent is healthy.
type Watchdog struct {
	cfg      WatchdogConfig
	interval time.Duration
}

// NewWatchdog checks cfg. With Timeout 0 the Watchdog is off: Run returns
// at once. A timeout of MinWatchdogTimeout or less is an error, and so is
// a timeout without a Notifier that can send.
func NewWatchdog(cfg WatchdogConfig) (*Watchdog, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	w := &Watchdog{cfg: cfg}
	if cfg.Timeout == 0 {
		return w, nil
	}
	if cfg.Timeout <= MinWatchdogTimeout {
		return nil, fmt.Errorf("sdnotify: watchdog timeout %v (%s) is too small: it must exceed %v", cfg.Timeout, WatchdogUSEnv, MinWatchdogTimeout)
	}
	if !cfg.Notifier.Enabled() {
		return nil, fmt.Errorf("sdnotify: watchdog timeout %v set (%s) but no %s to notify", cfg.Timeout, WatchdogUSEnv, SocketEnv)
	}
	w.interval = cfg.Timeout / 2
	return w, nil
}

// Interval is how often Run pets the watchdog (half the timeout); 0 when
// it is off.
func (w *Watchdog) Interval() time.Duration { return w.interval }

// Step runs the health check and, when it passes, sends WATCHDOG=1,
// retrying a failed send as upstream. It returns the check's error (the
// watchdog was not petted) or the last send error.
func (w *Watchdog) Step(ctx context.Context) error {
	if w.interval == 0 {
		return errors.New("sdnotify: the watchdog is off")
	}
	if w.cfg.Check != nil {
		if err := w.cfg.Check(); err != nil {
			return fmt.Errorf("sdnotify: not petting the watchdog: unhealthy: %w", err)
		}
	}
	wait := firstRetry
	var err error
	for try := 0; ; try++ {
		if _, err = w.cfg.Notifier.Notify(ctx, KeepAlive); err == nil {
			return nil
		}
		if try == retries {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-w.cfg.Clock.After(wait):
		}
		wait *= 2
	}
}

// Run pets the watchdog every Interval until ctx is done; it returns nil
// at once when the watchdog is off. Failures are logged, not returned:
// the watchdog's timeout is what acts on them.
func (w *Watchdog) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if w.interval == 0 {
		logger.Info("Systemd watchdog is not enabled")
		return nil
	}
	logger.Info("Starting the systemd watchdog", "interval", w.interval)
	t := w.cfg.Clock.NewTicker(w.interval)
	defer t.Stop()
	for {
		if err := w.Step(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Systemd watchdog not notified this interval")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}
