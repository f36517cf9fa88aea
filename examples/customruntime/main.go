// Command customruntime is a node agent whose pods are plain host
// processes: its nodekit.Runtime (procRuntime) runs each container's command
// with os/exec, and nodekit does the rest — restart policy, crash-loop
// back-off, liveness/readiness/startup probes, lifecycle hooks, pod status.
// Pods come from a directory of manifests; statuses are printed.
//
//	go run ./examples/customruntime -manifests ./pods
//
// The processes run as the agent's user, with no isolation: run only
// commands you trust. Stopping the agent kills them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/podconfig"
	"github.com/nodekit/nodekit/probes"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
)

func main() {
	cfg := config{nodeName: "proc-node", sink: printSink{os.Stdout}}
	flag.StringVar(&cfg.manifests, "manifests", "", "directory of pod manifests (required)")
	flag.StringVar(&cfg.rootDir, "root-dir", filepath.Join(os.TempDir(), "customruntime"), "the agent's state and the pods' working directories")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "customruntime:", err)
		os.Exit(1)
	}
}

type config struct {
	manifests, rootDir, nodeName string
	sink                         nodekit.StatusSink
}

// run wires the agent and runs it until ctx is done.
func run(ctx context.Context, cfg config) error {
	if cfg.manifests == "" {
		return errors.New("-manifests is required")
	}
	rt := &procRuntime{dir: filepath.Join(cfg.rootDir, "procs"), pods: map[types.UID]*procPod{}}
	defer rt.Close()
	pods := podconfig.New([]nodekit.Source{podconfig.NewFileSource(cfg.manifests, cfg.nodeName, clock.RealClock{})})
	cache := pleg.NewCache()
	lifecycle := pleg.New(rt, cache, pleg.Options{}) // evented when rt streams container events
	// The pod store is built first: the loop fills it, the status manager reads it.
	store := syncloop.NewPodStore()
	status, err := statusmgr.NewManager(statusmgr.Config{Sink: cfg.sink, Pods: store})
	if err != nil {
		return err
	}
	prober, err := probes.NewManager(probes.Config{Status: status, Execer: rt})
	if err != nil {
		return err
	}
	loop, err := syncloop.New(syncloop.Config{
		Runtime: rt, Pods: store, Cache: cache, Status: status, Updates: pods.Updates(), SourcesReady: pods.SeenAllSources,
		Events: lifecycle.Events(), Health: func(context.Context) error { return lifecycle.Healthy() },
		Probes: prober, ProbeWorkers: prober, ProbeUpdates: prober.Updates(),
		Hooks:   probes.NewHookRunner(probes.HookConfig{Execer: rt}),
		RootDir: cfg.rootDir,
	})
	if err != nil {
		return err
	}
	lifecycle.Relist(ctx)
	for _, part := range []func(context.Context) error{pods.Run, lifecycle.Run, status.Run, prober.Run} {
		go func() { _ = part(ctx) }()
	}
	return loop.Run(ctx)
}

// printSink prints one line per published status.
type printSink struct{ w io.Writer }

func (s printSink) SetPodStatus(_ context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	var cs []string
	for _, c := range st.ContainerStatuses {
		state := "waiting"
		if c.State.Running != nil {
			state = "running"
		} else if c.State.Terminated != nil {
			state = "terminated"
		}
		cs = append(cs, fmt.Sprintf("%s=%s(ready=%v,restarts=%d)", c.Name, state, c.Ready, c.RestartCount))
	}
	_, err := fmt.Fprintf(s.w, "%s/%s %s %s\n", pod.Namespace, pod.Name, st.Phase, strings.Join(cs, " "))
	return err
}

func (s printSink) DeletePod(context.Context, *v1.Pod) error { return nil }
