package main

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/sdnotify"
)

// systemdNotify is the agent's side of a Type=notify systemd service, as
// upstream kubelet: READY=1 once the agent runs, and with the watchdog on
// ($WATCHDOG_USEC, SystemdWatchdog) WATCHDOG=1 every half timeout while
// the sync loop is healthy. Without $NOTIFY_SOCKET it does nothing.
type systemdNotify struct {
	n *sdnotify.Notifier
	w *sdnotify.Watchdog
}

// newSystemdNotify reads the notify socket and the watchdog from getenv
// for the process pid; a watchdog timeout of 1s or less fails the start,
// as upstream.
func newSystemdNotify(getenv func(string) string, pid int, healthy func() error) (*systemdNotify, error) {
	n := sdnotify.FromEnv(getenv)
	timeout, err := sdnotify.WatchdogTimeout(getenv, pid)
	if err != nil {
		return nil, fmt.Errorf("systemd watchdog: %w", err)
	}
	w, err := sdnotify.NewWatchdog(sdnotify.WatchdogConfig{Notifier: n, Timeout: timeout, Check: healthy})
	if err != nil {
		return nil, fmt.Errorf("systemd watchdog: %w", err)
	}
	return &systemdNotify{n: n, w: w}, nil
}

// ready tells systemd the agent runs (the node registered, if it could
// be, and the loop started) and starts the watchdog.
func (s *systemdNotify) ready(ctx context.Context, start starter) {
	logger := klog.FromContext(ctx)
	if sent, err := s.n.Notify(ctx, sdnotify.Ready); err != nil {
		logger.Error(err, "Failed to tell systemd the agent is ready")
	} else if sent {
		logger.Info("Told systemd the agent is ready (READY=1)")
	}
	start("systemd watchdog", s.w.Run)
}
