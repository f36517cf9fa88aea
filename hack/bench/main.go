// Command bench measures node agents side by side on one machine: it runs
// the same workload once per agent: fullagent (built from this checkout),
// the upstream kubelet v1.37.2 and the ideal agent (below), and prints one
// Markdown table with each agent's ratio to kubelet per row, under a
// description of the machine, ready to paste into the README.
//
//	go run ./hack/bench [--runtime containerd|fake] [--pods 100] [--agents fullagent,kubelet,ideal] [--steady 60s] [--timeout 5m] [--keep [--residency] [--burst-profile 10s] [--burst-trace 4s]] [--pull [--pull-images 1]] [--kubelet PATH]
//	go run ./hack/bench residency --pid PID | --bin BINARY
//
// Both agents are built as upstream builds its release binaries (build
// tags releaseTags, -trimpath): fullagent from this checkout for each run,
// the kubelet once into _output/bench/kubelet from hack/tools' module
// (minutes; --kubelet takes another binary). The tags matter: without
// grpcnotrace either binary is about 40% larger (see releaseTags), and on
// this kernel most of a binary's pages end up resident (the page cache
// holds it in large folios, mapped whole), so RSS follows binary size.
//
// With --keep, the work directory keeps each agent's log, heap profiles at
// 0 and N pods (and runtime.MemStats, heap-N-pods.txt), when the last pod
// runs (heap-burst-end.pb.gz) and at the start of the steady window
// (heap-steady-start.pb.gz: the base for what the window allocated), with
// --residency its resident binary pages by section, module and package at
// 0 and N pods (residency-N-pods.md: /proc/PID/pagemap's present bits, the
// bytes of each resident page charged to the function, type descriptor,
// pclntab entry or variable there, from the ELF symbols, DWARF and the
// pclntab), and with
// --burst-profile a CPU profile of the burst's first seconds
// (cpu-burst.pb.gz), with --burst-trace an execution trace of them
// (trace-burst.out, for `go tool trace`: where goroutines waited). `bench residency` prints the same for any running Go
// process, or the sizes of a binary's parts (--bin).
//
// It needs root. For each agent it starts a fresh private etcd +
// kube-apiserver (internal/localcp, free loopback ports) and a fresh
// runtime, so no state carries over from one agent to the next;
// everything is stopped and removed after each run. The runtime
// (--runtime):
//   - containerd (default): a private containerd with the test images
//     preloaded (internal/localcri: its own socket, its own pod bridge and
//     /24); the agents publish and serve on the bridge's gateway;
//   - fake: internal/fakecri, upstream's in-memory CRI fakes served on a
//     unix socket: nothing runs, a started container is running at once,
//     so what is measured is the agent's own pipeline. The agents publish
//     the default-route interface's address as node IP (nobody dials it)
//     and serve on 127.0.0.1 on a free port, kubelet's healthz off.
//
// --pull (containerd only) makes the cache cold: each run also starts a
// local registry (internal/localregistry, TLS on loopback) next to its
// containerd, pushes busybox to it under pullRegistry (burstImages),
// points containerd's hosts for that name at it and nowhere else, imports
// only the pause image, and checks through the CRI ImageStatus that no
// burst image is present before the burst. The pods then pull (all the
// same image, or spread over --pull-images repositories of the same
// content). The report adds, per agent, the registry's answered manifest
// requests by tag (pulls containerd started), manifest GETs and blob
// GETs (from its access log), and the agent's Pulling and Pulled events
// (from the audit log): how many, first Pulling → last Pulled, and the
// pull times the Pulled messages quote.
//
// fullagent and kubelet run as child processes with the same
// KubeletConfiguration (node name bench-node, --node-ip as above,
// clusterDNS, maxPods = max(110, N+10), default status update
// frequencies and API QPS unless --kube-api-qps sets them for both,
// serializeImagePulls false) plus what only the
// kubelet reads: failCgroupV1 false, failSwapOn false; both get a
// cgroupRoot of their own (/nkbench-*), so neither touches another
// kubelet's /kubepods, with either runtime.
//
// The ideal agent (--agents ideal) is this binary run as a child with
// idealCommand: on client-go with the node's identity, it registers the
// Node Ready, renews its Lease and patches each pod Running (containers
// running and ready) as soon as its watch sees it bound to the node, 8
// patches at a time, with no client-side rate limit: the floor the API
// server allows a node agent. Its figures are the API server's and the
// watch's share of every agent's. The ideal agent with kubelet's requests
// (--agents ideal-requests) is the same agent making, for each pod, the
// requests a conforming agent makes for it on this workload: a token
// request bound to the pod (its service account volume) before the
// status write, and after it the container's three events (Pulled, image
// already present; Created; Started), written one at a time by one
// goroutine as kubelet's event broadcaster writes them: the floor the
// API server allows an agent that sends what kubelet sends. The limited
// ideal agent (--agents ideal-limited) is that agent through kubelet's
// client rate limits: the token requests, status writes, Node, Lease and
// watch on one client limited by the agents' kubeAPIQPS and kubeAPIBurst
// (upstream's 50 and 100, or --kube-api-qps and --kube-api-burst), the
// events on a client of their own limited by eventRecordQPS and
// eventBurst (upstream's 50 and 100), as kubelet builds its two clients:
// the floor for an agent that sends what kubelet sends within its limits.
//
// The workload: once the node is Ready, N busybox pods (`sleep 3600`,
// imagePullPolicy IfNotPresent, image present, so nothing is pulled,
// unless --pull) are
// created at once, bound (spec.nodeName set; no scheduler runs).
// Measured, per agent:
//   - pod startup p50/p99: creation → Running as seen by a watch on the API
//     server, and the time until all N are Running;
//   - the start path of each pod, with stage medians and the median pod's
//     stages in the report: creation (the bench's create call) → the
//     agent's first API request about the pod (naming it, or a token
//     request bound to it, or an event about it) → the status write that
//     set it Running → Running seen by the watch; the middle two come from
//     the audit log (requestReceivedTimestamp; the bodies of status
//     writes, token requests and events are logged to tell which pod they
//     are for and which write set phase Running), so no agent is patched;
//   - agent CPU seconds (user+system, with waited-for children, from
//     /proc/PID/stat) and peak RSS (VmHWM, reset through clear_refs just
//     before the burst) during the burst;
//   - RSS with 0 pods (5 s after Ready) and with N pods (end of the steady
//     window);
//   - agent CPU seconds per minute in the steady window (all N pods
//     running), the same /proc reading over the window;
//   - goroutines with 0 pods and with N pods (at the same two points), from
//     each agent's /debug/pprof/goroutine?debug=1 (its profiling handler,
//     on by default in both), read as the cluster admin over HTTPS; the
//     ideal agent serves none ("–");
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
	agentIdeal   = "ideal"
	// agentIdealRequests is the ideal agent making, for each pod, the
	// requests kubelet makes for it on this workload (see idealMain).
	agentIdealRequests = "ideal-requests"
	// agentIdealLimited is agentIdealRequests through kubelet's client
	// rate limits (see idealMain).
	agentIdealLimited = "ideal-limited"
)

// Upstream's defaults for the agents' client rate limits
// (KubeletConfiguration kubeAPIQPS, kubeAPIBurst, eventRecordQPS,
// eventBurst), which the bench leaves to both agents unless
// --kube-api-qps sets the first two.
const (
	upstreamAPIQPS     = 50
	upstreamAPIBurst   = 100
	upstreamEventQPS   = 50
	upstreamEventBurst = 100
)

// isIdeal reports whether the agent is one of the ideal agents: this
// binary as a child, with no runtime, cgroups or profiling handler.
func isIdeal(agent string) bool {
	return agent == agentIdeal || agent == agentIdealRequests || agent == agentIdealLimited
}

type options struct {
	pods   int
	agents []string
	// runtime is what the pods run on: runtimeContainerd or runtimeFake.
	runtime string
	steady  time.Duration
	timeout time.Duration
	// keep leaves the work directory (agent logs, audit logs) in place.
	keep bool
	// containerd is the version each run's containerd is (localcri
	// Containerd16 or Containerd2).
	containerd string
	// pull has the pods pull their image from a local registry into a
	// containerd without it (--pull); pullImages is how many repositories
	// (same content) the pods are spread over.
	pull       bool
	pullImages int
	// kubelet is the upstream kubelet binary (--kubelet); "" for the
	// release build (releaseKubelet).
	kubelet string
	// residency saves each agent's resident pages by package (--residency).
	residency bool
	// burstProfile is how long to profile the agent's CPU from the start
	// of the burst (--burst-profile); 0 for no profile.
	burstProfile time.Duration
	// burstTrace is how long to trace the agent's execution from the
	// start of the burst (--burst-trace); 0 for no trace.
	burstTrace time.Duration
	// apiQPS and apiBurst, when apiQPS is above 0, are both agents'
	// kubeAPIQPS and kubeAPIBurst (--kube-api-qps, --kube-api-burst)
	// instead of upstream's defaults (50 and 100).
	apiQPS, apiBurst int
	// repeat is how many rounds of the agents run (--repeat); 0 is 1.
	repeat int
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == idealCommand {
		os.Exit(idealMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == residencyCommand {
		os.Exit(residencyMain(os.Args[2:]))
	}
	var o options
	agents := flag.String("agents", agentFull+","+agentKubelet, "agents to bench, in order: any of fullagent, kubelet, ideal, ideal-requests and ideal-limited")
	flag.StringVar(&o.kubelet, "kubelet", "", "the upstream kubelet binary (default: _output/bench/kubelet, built on first use with upstream's release build tags)")
	flag.StringVar(&o.runtime, "runtime", runtimeContainerd, "what the pods run on: containerd, or fake (internal/fakecri, nothing runs)")
	flag.IntVar(&o.pods, "pods", 100, "pods to create at once")
	flag.DurationVar(&o.steady, "steady", 60*time.Second, "steady-state window for API requests per minute (N pods running)")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for all pods to run")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (each agent's log, its heap profile at the end of the steady window, and the API server's audit log) and print its path")
	flag.StringVar(&o.containerd, "containerd", "", "containerd to run the pods on: 1.6 or 2 (default $NODEKIT_CONTAINERD, else 1.6)")
	flag.BoolVar(&o.pull, "pull", false, "cold cache: the pods pull their image from a local registry into a containerd that lacks it (containerd runtime only)")
	flag.IntVar(&o.pullImages, "pull-images", 1, "with --pull: distinct repositories (same content) the pods are spread over, so this many pulls")
	flag.BoolVar(&o.residency, "residency", false, "with --keep: write each agent's resident binary pages by package and module (pagemap; see `bench residency`) at 0 and N pods into the work directory")
	flag.DurationVar(&o.burstProfile, "burst-profile", 0, "with --keep: profile each agent's CPU (its /debug/pprof/profile) for this long from the start of the burst into cpu-burst.pb.gz; the steady window waits for it")
	flag.DurationVar(&o.burstTrace, "burst-trace", 0, "with --keep: trace each agent's execution (its /debug/pprof/trace) for this long from the start of the burst into trace-burst.out; the steady window waits for it")
	flag.IntVar(&o.repeat, "repeat", 1, "rounds to run, the agents' order turned by one each round; with more than one, each round's report and then the medians over the rounds")
	flag.IntVar(&o.apiQPS, "kube-api-qps", 0, "both agents' kubeAPIQPS (default: upstream's, 50), and ideal-limited's; the other ideal agents have no limit")
	flag.IntVar(&o.apiBurst, "kube-api-burst", 0, "with --kube-api-qps: both agents' kubeAPIBurst (default: twice the QPS)")
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
	if _, err := localcp.FindBinDir(); err != nil {
		return err
	}
	var err error
	kubelet := o.kubelet
	kubeletVersion := ""
	if slices.Contains(o.agents, agentKubelet) {
		if kubelet == "" {
			if kubelet, err = releaseKubelet(ctx); err != nil {
				return err
			}
		}
		if _, err := os.Stat(kubelet); err != nil {
			return fmt.Errorf("--kubelet: %w", err)
		}
		if kubeletVersion, err = binaryVersion(ctx, kubelet); err != nil {
			return err
		}
		logf("kubelet %s, build tags %s", kubelet, buildTags(kubelet))
	}
	top, err := os.MkdirTemp("", "nkbench-")
	if err != nil {
		return err
	}
	defer func() {
		if o.keep {
			logf("work directory kept: %s", top)
			return
		}
		_ = os.RemoveAll(top)
	}()

	bins := map[string]string{agentKubelet: kubelet}
	if bins[agentIdeal], err = os.Executable(); err != nil {
		return err
	}
	bins[agentIdealRequests], bins[agentIdealLimited] = bins[agentIdeal], bins[agentIdeal]
	if slices.Contains(o.agents, agentFull) {
		logf("building fullagent")
		if bins[agentFull], err = buildFullagent(ctx, top); err != nil {
			return err
		}
	}
	machine := describeMachine()
	var rounds [][]*result
	for i := range o.repeat {
		dir := top
		if o.repeat > 1 {
			dir = filepath.Join(top, fmt.Sprintf("round%d", i+1))
			logf("round %d of %d", i+1, o.repeat)
		}
		machine.date = time.Now()
		results, err := runRound(ctx, roundOrder(o.agents, i), bins, dir, o)
		if err != nil {
			return err
		}
		machine.runtime = results[len(results)-1].runtime
		if o.repeat > 1 {
			fmt.Fprintf(os.Stdout, "\n## Round %d of %d\n", i+1, o.repeat)
		}
		printReport(os.Stdout, machine, o, kubeletVersion, results)
		rounds = append(rounds, results)
	}
	if o.repeat > 1 {
		printMedians(os.Stdout, o, kubeletVersion, rounds)
	}
	return nil
}

// runRound runs each agent in order, each with a fresh control plane and
// runtime in its own directory under dir.
func runRound(ctx context.Context, order []string, bins map[string]string, dir string, o options) ([]*result, error) {
	var results []*result
	for _, a := range order {
		logf("%s: starting a fresh control plane and %s runtime", a, o.runtime)
		r, err := runOne(ctx, a, bins[a], filepath.Join(dir, a), o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
		if !isIdeal(a) {
			r.build = buildTags(bins[a])
		}
		results = append(results, r)
		logf("%s: done", a)
	}
	return results, nil
}

// validateAPILimits checks --kube-api-qps and --kube-api-burst and fills
// in the burst's default, twice the QPS (upstream's ratio).
func (o *options) validateAPILimits() error {
	switch {
	case o.apiQPS < 0:
		return fmt.Errorf("--kube-api-qps=%d: want 0 (upstream's default) or more", o.apiQPS)
	case o.apiQPS == 0 && o.apiBurst != 0:
		return fmt.Errorf("--kube-api-burst=%d needs --kube-api-qps", o.apiBurst)
	case o.apiBurst < 0:
		return fmt.Errorf("--kube-api-burst=%d: want more than 0", o.apiBurst)
	case o.apiQPS > 0 && o.apiBurst == 0:
		o.apiBurst = 2 * o.apiQPS
	}
	return nil
}

// apiLimits is the KubeletConfiguration lines of --kube-api-qps and
// --kube-api-burst, "" for upstream's defaults.
func (o *options) apiLimits() string {
	if o.apiQPS == 0 {
		return ""
	}
	return fmt.Sprintf("kubeAPIQPS: %d\nkubeAPIBurst: %d\n", o.apiQPS, o.apiBurst)
}

// idealLimits is ideal-limited's command line for the agents' client
// rate limits: kubeAPIQPS and kubeAPIBurst as apiLimits gives them to the
// agents (upstream's when --kube-api-qps is not given), and upstream's
// eventRecordQPS and eventBurst, which the bench does not change.
func (o *options) idealLimits() []string {
	qps, burst := upstreamAPIQPS, upstreamAPIBurst
	if o.apiQPS > 0 {
		qps, burst = o.apiQPS, o.apiBurst
	}
	return []string{fmt.Sprintf("--qps=%d", qps), fmt.Sprintf("--burst=%d", burst),
		fmt.Sprintf("--event-qps=%d", upstreamEventQPS), fmt.Sprintf("--event-burst=%d", upstreamEventBurst)}
}

func (o *options) validate() error {
	if o.runtime != runtimeContainerd && o.runtime != runtimeFake {
		return fmt.Errorf("--runtime=%q: want containerd or fake", o.runtime)
	}
	v, err := localcri.ResolveVersion(o.containerd)
	if err != nil {
		return fmt.Errorf("--containerd: %w", err)
	}
	o.containerd = v
	if o.pods < 1 {
		return fmt.Errorf("--pods=%d: want at least 1", o.pods)
	}
	switch {
	case o.repeat < 0:
		return fmt.Errorf("--repeat=%d: want at least 1", o.repeat)
	case o.repeat == 0:
		o.repeat = 1
	}
	if o.steady < time.Second {
		return fmt.Errorf("--steady=%v: want at least 1s", o.steady)
	}
	if len(o.agents) == 0 {
		return errors.New("--agents is empty: want any of fullagent, kubelet, ideal, ideal-requests and ideal-limited")
	}
	if err := o.validatePull(); err != nil {
		return err
	}
	if err := o.validateAPILimits(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, a := range o.agents {
		if a != agentFull && a != agentKubelet && !isIdeal(a) {
			return fmt.Errorf("--agents: unknown agent %q: want fullagent, kubelet, ideal, ideal-requests or ideal-limited", a)
		}
		if seen[a] {
			return fmt.Errorf("--agents: %q given twice", a)
		}
		seen[a] = true
	}
	return nil
}

// validatePull checks --pull and --pull-images.
func (o *options) validatePull() error {
	if !o.pull {
		if o.pullImages > 1 {
			return fmt.Errorf("--pull-images=%d needs --pull", o.pullImages)
		}
		return nil
	}
	if o.runtime != runtimeContainerd {
		return fmt.Errorf("--pull needs --runtime=containerd: the fake runtime pulls nothing (--runtime=%s)", o.runtime)
	}
	if o.pullImages < 1 || o.pullImages > o.pods {
		return fmt.Errorf("--pull-images=%d: want 1 to --pods (%d)", o.pullImages, o.pods)
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
