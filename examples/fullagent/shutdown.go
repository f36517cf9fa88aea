package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/events"
	"github.com/nodekit/nodekit/shutdown"
	"github.com/nodekit/nodekit/shutdown/logind"
	"github.com/nodekit/nodekit/syncloop"
)

// newShutdown builds the graceful node shutdown manager from
// shutdownGracePeriod, shutdownGracePeriodCriticalPods and
// shutdownGracePeriodByPodPriority (off when none is set, as upstream).
// pods is the loop's pod store, which lists and kills the loop's pods.
func (a *agent) newShutdown(cfg *kubeletv1beta1.KubeletConfiguration, recorder *events.Recorder, pods *syncloop.PodStore) (*shutdown.Manager, error) {
	groups, err := shutdown.Groups(shutdown.GracePeriodConfig{
		ShutdownGracePeriod:              cfg.ShutdownGracePeriod.Duration,
		ShutdownGracePeriodCriticalPods:  cfg.ShutdownGracePeriodCriticalPods.Duration,
		ShutdownGracePeriodByPodPriority: cfg.ShutdownGracePeriodByPodPriority,
	})
	if err != nil {
		return nil, err // names the field
	}
	a.shutdownGrace = shutdown.TotalGracePeriod(groups)
	times, err := registerShutdownTimes(a.metrics.reg)
	if err != nil {
		return nil, err
	}
	return shutdown.New(shutdown.Config{
		Groups:     groups,
		ActivePods: pods.ActivePods,
		Killer:     shutdown.PodKillerFunc(pods.KillPod),
		Cleanup:    shutdown.CleanupFunc(pods.PodCleanedUp),
		SyncNodeStatus: func(ctx context.Context) error {
			if a.node == nil {
				return nil
			}
			return a.node.SyncOnce(ctx)
		},
		StateFile: filepath.Join(a.rootDir, shutdown.StateFileName),
		Times:     times,
		Events:    recorder,
		NodeRef:   &v1.ObjectReference{Kind: "Node", Name: a.nodeName, UID: types.UID(a.nodeName)},
	})
}

// registerShutdownTimes registers upstream's two gauges of the last
// graceful shutdown (always, as upstream, where the feature gates are GA)
// and returns the function that sets them.
func registerShutdownTimes(reg prometheus.Registerer) (func(shutdown.State), error) {
	start := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kubelet_graceful_shutdown_start_time_seconds",
		Help: "[ALPHA] Last graceful shutdown start time since unix epoch in seconds"})
	end := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kubelet_graceful_shutdown_end_time_seconds",
		Help: "[ALPHA] Last graceful shutdown end time since unix epoch in seconds"})
	for _, g := range []prometheus.Collector{start, end} {
		if err := reg.Register(g); err != nil {
			return nil, fmt.Errorf("register the graceful shutdown metrics: %w", err)
		}
	}
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.Unix())
	}
	return func(s shutdown.State) {
		start.Set(unix(s.StartTime))
		end.Set(unix(s.EndTime))
	}, nil
}

// shutdownTrigger is systemd-logind's trigger (on the system bus,
// $DBUS_SYSTEM_BUS_ADDRESS or the default: options.systemBus) together
// with SIGPWR.
func (a *agent) shutdownTrigger() *nodeShutdownTrigger {
	return &nodeShutdownTrigger{
		logind: logind.New(logind.Config{BusAddress: a.systemBus, GracePeriod: a.shutdownGrace}),
		signal: shutdown.SignalTrigger(syscall.SIGPWR),
	}
}

// nodeShutdownTrigger reports logind's shutdowns and SIGPWR. When logind
// cannot be watched (no system bus, no logind, InhibitDelayMaxSec not
// raised), the error is logged as upstream kubelet logs "Failed to start
// node shutdown manager" and goes on, and SIGPWR alone remains. Release
// closes logind's lock after a shutdown logind announced.
type nodeShutdownTrigger struct {
	logind *logind.Trigger
	signal shutdown.Trigger

	mu         sync.Mutex
	fromLogind bool
}

var (
	_ shutdown.Trigger  = (*nodeShutdownTrigger)(nil)
	_ shutdown.Releaser = (*nodeShutdownTrigger)(nil)
)

func (t *nodeShutdownTrigger) Watch(ctx context.Context) (<-chan bool, error) {
	logger := klog.FromContext(ctx)
	fromLogind, err := t.logind.Watch(ctx)
	if err != nil {
		logger.Error(err, "Failed to start node shutdown manager on systemd-logind; only SIGPWR starts a graceful node shutdown")
		fromLogind = nil
	} else {
		logger.Info("Node shutdown manager watching systemd-logind", "inhibitDelayMax", t.logind.InhibitDelay())
	}
	fromSignal, err := t.signal.Watch(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan bool, 1)
	go func() {
		defer close(out)
		for fromLogind != nil || fromSignal != nil {
			var v, ok, byLogind bool
			select {
			case <-ctx.Done():
				return
			case v, ok = <-fromLogind:
				byLogind = true
			case v, ok = <-fromSignal:
			}
			if !ok {
				if byLogind {
					fromLogind = nil
				} else {
					fromSignal = nil
				}
				continue
			}
			if v {
				t.mu.Lock()
				t.fromLogind = byLogind
				t.mu.Unlock()
			}
			select {
			case out <- v:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (t *nodeShutdownTrigger) Release(ctx context.Context) error {
	t.mu.Lock()
	byLogind := t.fromLogind
	t.mu.Unlock()
	if !byLogind {
		return nil
	}
	return t.logind.Release(ctx)
}
