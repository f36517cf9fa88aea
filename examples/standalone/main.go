// Command standalone is the smallest useful node agent: no API server, the
// static pods of a manifest directory run on a CRI runtime (containerd),
// with restart policy, back-off, probes and lifecycle hooks, and their
// statuses logged. It is what an appliance or an edge box needs.
//
//	go run ./examples/standalone -manifests /etc/kubernetes/manifests
//
// Adding, changing or removing a manifest starts, replaces or stops its
// pod. Stopping the agent leaves the containers running; the next run
// adopts them.
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/podconfig"
	"github.com/nodekit/nodekit/probes"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
)

func main() {
	var cfg config
	cfg.nodeName, _ = os.Hostname()
	flag.StringVar(&cfg.endpoint, "runtime-endpoint", "unix:///run/containerd/containerd.sock", "CRI endpoint")
	flag.StringVar(&cfg.manifests, "manifests", "/etc/kubernetes/manifests", "directory of static pod manifests")
	flag.StringVar(&cfg.rootDir, "root-dir", "/var/lib/standalone", "the agent's state: pod directories")
	flag.StringVar(&cfg.podLogsDir, "pod-logs-dir", "/var/log/pods", "where container logs go")
	flag.StringVar(&cfg.nodeName, "node-name", cfg.nodeName, "the node's name, a suffix of every pod's name")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if err := run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		klog.Background().Error(err, "standalone failed")
		os.Exit(1)
	}
}

type config struct{ endpoint, manifests, rootDir, podLogsDir, nodeName string }

// run wires the agent and runs it until ctx is done.
func run(ctx context.Context, cfg config) error {
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cfg.endpoint, PodLogsDir: cfg.podLogsDir})
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	}()
	pods := podconfig.New([]nodekit.Source{podconfig.NewFileSource(cfg.manifests, cfg.nodeName, clock.RealClock{})})
	cache := pleg.NewCache()
	lifecycle := pleg.New(rt, cache, pleg.Options{}) // evented when rt streams container events
	// The pod store is built first: the loop fills it, the status manager reads it.
	store := syncloop.NewPodStore()
	status, err := statusmgr.NewManager(statusmgr.Config{Sink: logSink{}, Pods: store})
	if err != nil {
		return err
	}
	prober, err := probes.NewManager(probes.Config{Status: status, Execer: rt})
	if err != nil {
		return err
	}
	loop, err := syncloop.New(syncloop.Config{
		Runtime: rt, Pods: store, Cache: cache, Status: status, Updates: pods.Updates(),
		SourcesReady: pods.SeenAllSources, Events: lifecycle.Events(),
		Health: func(ctx context.Context) error {
			if err := rt.Ready(ctx); err != nil {
				return err
			}
			return lifecycle.Healthy()
		},
		Probes: prober, ProbeWorkers: prober, ProbeUpdates: prober.Updates(),
		Hooks:         probes.NewHookRunner(probes.HookConfig{Execer: rt}),
		ContainerHash: criruntime.HashContainer,
		RootDir:       cfg.rootDir,
	})
	if err != nil {
		return err
	}
	lifecycle.Relist(ctx) // the PLEG is healthy before the loop looks
	for _, part := range []func(context.Context) error{pods.Run, lifecycle.Run, status.Run, prober.Run} {
		go func() { _ = part(ctx) }()
	}
	return loop.Run(ctx)
}

// logSink is the local status sink: it logs each new pod status.
type logSink struct{}

func (logSink) SetPodStatus(ctx context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	kv := []any{"pod", klog.KObj(pod), "phase", st.Phase, "podIP", st.PodIP}
	for _, c := range st.ContainerStatuses {
		kv = append(kv, "container", c.Name, "ready", c.Ready, "restarts", c.RestartCount)
	}
	klog.FromContext(ctx).Info("Pod status", kv...)
	return nil
}

func (logSink) DeletePod(context.Context, *v1.Pod) error { return nil }
