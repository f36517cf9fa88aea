// Command bench measures node agents side by side on one machine: it runs
// the same workload once with fullagent (built from this checkout) and once
// with the upstream kubelet v1.37.2 (_output/bin/kubelet, built by `bash
// hack/build-tools.sh conformance`), and prints one Markdown table with a
// fullagent/kubelet ratio per row, under a description of the machine, ready
// to paste into the README.
//
//	go run ./hack/bench [--pods 100] [--agents fullagent,kubelet] [--steady 60s] [--timeout 5m]
//
// It needs root. For each agent it starts a fresh private etcd +
// kube-apiserver (internal/localcp, free loopback ports) and a fresh
// containerd with the test images preloaded (internal/localcri: its own
// socket, its own pod bridge and /24), so no state carries over from one
// agent to the next; everything is stopped and removed after each run.
// The agent runs as a child process with the same KubeletConfiguration
// for both (node name bench-node, --node-ip = the pod bridge's gateway,
// which it also serves on, clusterDNS, maxPods = max(110, N+10), default
// status update frequencies, serializeImagePulls false) plus what only the
// kubelet reads: failCgroupV1 false, failSwapOn false and a cgroupRoot of
// its own (/nkbench-*), so it never touches another kubelet's /kubepods.
// fullagent leaves pod cgroups to containerd.
//
// The workload: once the node is Ready, N busybox pods (`sleep 3600`,
// imagePullPolicy IfNotPresent, image preloaded, so nothing is pulled) are
// created at once. Measured, per agent:
//   - pod startup p50/p99: creation → Running as seen by a watch on the API
//     server, and the time until all N are Running;
//   - agent CPU seconds (user+system, with waited-for children, from
//     /proc/PID/stat) and peak RSS (VmHWM, reset through clear_refs just
//     before the burst) during the burst;
//   - RSS with 0 pods (5 s after Ready) and with N pods (end of the steady
//     window);
//   - API requests: the API server writes an audit log holding one event
//     (stage RequestReceived) per request of user system:node:bench-node,
//     the agent's client identity, and nobody else; the bench counts those
//     received during the burst and during a steady window (--steady,
//     starting 10 s after the last pod runs), and reports the latter per
//     minute, with a breakdown by verb and resource.
//
// Everything listens on loopback or on the bench's own pod bridge; other
// local clusters (hack/conformance, other benches) can run at the same
// time, though they skew the figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nodekit/nodekit/internal/localcp"
	"github.com/nodekit/nodekit/internal/localcri"
)

const nodeName = "bench-node"

// Agent names, as --agents takes them.
const (
	agentFull    = "fullagent"
	agentKubelet = "kubelet"
)

type options struct {
	pods    int
	agents  []string
	steady  time.Duration
	timeout time.Duration
	// containerd is the version each run's containerd is (localcri
	// Containerd16 or Containerd2).
	containerd string
}

func main() {
	var o options
	agents := flag.String("agents", agentFull+","+agentKubelet, "agents to bench, in order: fullagent, kubelet or both")
	flag.IntVar(&o.pods, "pods", 100, "pods to create at once")
	flag.DurationVar(&o.steady, "steady", 60*time.Second, "steady-state window for API requests per minute (N pods running)")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for all pods to run")
	flag.StringVar(&o.containerd, "containerd", "", "containerd to run the pods on: 1.6 or 2 (default $NODEKIT_CONTAINERD, else 1.6)")
	flag.Parse()
	for _, a := range strings.Split(*agents, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.agents = append(o.agents, a)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (it starts containerd, creates a bridge and runs the agents)")
	}
	bin, err := localcp.FindBinDir()
	if err != nil {
		return err
	}
	kubelet := filepath.Join(bin, "kubelet")
	kubeletVersion := ""
	if slices.Contains(o.agents, agentKubelet) {
		if _, err := os.Stat(kubelet); err != nil {
			return fmt.Errorf("upstream kubelet not found at %s: run `bash hack/build-tools.sh conformance` to build it (or pass --agents=fullagent)", kubelet)
		}
		if kubeletVersion, err = binaryVersion(ctx, kubelet); err != nil {
			return err
		}
	}
	top, err := os.MkdirTemp("", "nkbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(top)

	bins := map[string]string{agentKubelet: kubelet}
	if slices.Contains(o.agents, agentFull) {
		logf("building fullagent")
		if bins[agentFull], err = buildFullagent(ctx, top); err != nil {
			return err
		}
	}
	machine := describeMachine(ctx)
	var results []*result
	for _, a := range o.agents {
		logf("%s: starting a fresh control plane and containerd", a)
		r, err := runOne(ctx, a, bins[a], filepath.Join(top, a), o)
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		results = append(results, r)
		logf("%s: done", a)
		machine.containerd = "containerd " + r.runtimeVersion
	}
	printReport(os.Stdout, machine, o, kubeletVersion, results)
	return nil
}

func (o *options) validate() error {
	v, err := localcri.ResolveVersion(o.containerd)
	if err != nil {
		return fmt.Errorf("--containerd: %w", err)
	}
	o.containerd = v
	if o.pods < 1 {
		return fmt.Errorf("--pods=%d: want at least 1", o.pods)
	}
	if o.steady < time.Second {
		return fmt.Errorf("--steady=%v: want at least 1s", o.steady)
	}
	if len(o.agents) == 0 {
		return errors.New("--agents is empty: want fullagent, kubelet or both")
	}
	seen := map[string]bool{}
	for _, a := range o.agents {
		if a != agentFull && a != agentKubelet {
			return fmt.Errorf("--agents: unknown agent %q: want fullagent or kubelet", a)
		}
		if seen[a] {
			return fmt.Errorf("--agents: %q given twice", a)
		}
		seen[a] = true
	}
	return nil
}

// logf reports progress on stderr; the report goes to stdout.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// sleep waits d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
