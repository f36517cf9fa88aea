// Command customsink is a node agent without an API server — static pods
// from a directory, run on a CRI runtime such as containerd — that reports
// pod statuses as JSON lines (jsonSink) on stdout or to a file. Swap jsonSink
// for an MQTT or HTTP client to ship them elsewhere.
//
//	go run ./examples/customsink -manifests /etc/kubernetes/manifests -out /var/log/pods.jsonl
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/podconfig"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
)

func main() {
	var cfg config
	var out string
	cfg.nodeName, _ = os.Hostname()
	flag.StringVar(&cfg.endpoint, "runtime-endpoint", "unix:///run/containerd/containerd.sock", "CRI endpoint")
	flag.StringVar(&cfg.manifests, "manifests", "/etc/kubernetes/manifests", "directory of static pod manifests")
	flag.StringVar(&cfg.rootDir, "root-dir", "/var/lib/customsink", "the agent's state")
	flag.StringVar(&cfg.podLogsDir, "pod-logs-dir", "/var/log/pods", "where container logs go")
	flag.StringVar(&cfg.nodeName, "node-name", cfg.nodeName, "the node's name")
	flag.StringVar(&out, "out", "-", "file the JSON lines are appended to; - is stdout")
	flag.Parse()
	cfg.out = os.Stdout
	if out != "-" {
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "customsink:", err)
			os.Exit(1)
		}
		defer f.Close()
		cfg.out = f
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "customsink:", err)
		os.Exit(1)
	}
}

type config struct {
	endpoint, manifests, rootDir, podLogsDir, nodeName string
	out                                                io.Writer
}

// run wires the agent and runs it until ctx is done. Containers keep
// running after it returns; a restarted agent adopts them.
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
	status, err := statusmgr.NewManager(statusmgr.Config{Sink: newJSONSink(cfg.out), Pods: store})
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
		ContainerHash: criruntime.HashContainer,
		RootDir:       cfg.rootDir,
	})
	if err != nil {
		return err
	}
	lifecycle.Relist(ctx)
	for _, part := range []func(context.Context) error{pods.Run, lifecycle.Run, status.Run} {
		go func() { _ = part(ctx) }()
	}
	return loop.Run(ctx)
}
