// Command scale puts a private API server under the load of N nodes: it
// runs N hollow node agents (examples/hollow: the real pod source, sync
// loop, PLEG, status manager, Node status and Lease, on a fake runtime) as
// child processes against a private etcd + kube-apiserver, binds
// pods-per-node pods to each node, and watches the cluster for a while.
//
//	go run ./hack/scale --nodes 100 [--pods-per-node 10] [--duration 2m] [--timeout 10m]
//	bash hack/scale.sh 100 [flags]
//
// Steps: start the control plane (internal/localcp, free loopback ports,
// node certificates for hollow-0001..N made up front, and an audit log of
// every request of group system:nodes), build examples/hollow once, start
// the N agents (API QPS 5, burst 10), wait until every node is Ready,
// create the pods (busybox, spec.nodeName set; nothing really runs) and
// wait until all are Running with a pod IP, then observe for --duration:
// every 10 s each node must be Ready and its Lease renewed within the
// Lease's duration, and each agent's RSS (/proc/PID/status VmRSS) is
// sampled. At the end it prints a Markdown table: nodes, pods, whether
// every node stayed Ready (and how many observations missed), agent RSS,
// agent CPU (/proc/PID/stat), API requests per minute per agent counted
// from the audit log by node identity (system:node:NAME) during the
// observation window, and the API server's RSS and CPU.
//
// It needs no root and touches nothing outside its temporary directory:
// hollow agents have no cgroups, network or volumes. Everything it started
// is stopped (by pid) and its directory removed, also on failure or
// Ctrl-C. It exits with status 1 when a node missed an observation, an
// agent exited or a pod stopped running, after printing the table.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/internal/localcp"
)

// observeEvery is the period of the Ready, Lease and RSS checks.
const observeEvery = 10 * time.Second

type options struct {
	nodes, podsPerNode int
	duration, timeout  time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 3, "hollow nodes to run")
	flag.IntVar(&o.podsPerNode, "pods-per-node", 10, "pods bound to each node")
	flag.DurationVar(&o.duration, "duration", 2*time.Minute, "how long to observe once all pods run")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "how long to wait for the nodes to be Ready, and again for the pods to run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	if o.nodes < 1 || o.nodes > 9999 {
		return fmt.Errorf("--nodes=%d: want 1 to 9999", o.nodes)
	}
	if o.podsPerNode < 0 {
		return fmt.Errorf("--pods-per-node=%d: must not be negative", o.podsPerNode)
	}
	if o.duration < observeEvery {
		return fmt.Errorf("--duration=%v: want at least %v", o.duration, observeEvery)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout=%v: must be positive", o.timeout)
	}
	return nil
}

func nodeName(i int) string { return fmt.Sprintf("hollow-%04d", i+1) }

func run(ctx context.Context, o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	cleanupCtx := context.WithoutCancel(ctx)
	top, err := os.MkdirTemp("", "nkscale-")
	if err != nil {
		return err
	}
	defer func() {
		if err := os.RemoveAll(top); err != nil {
			logf("remove %s: %v", top, err)
		}
	}()
	names := make([]string, o.nodes)
	for i := range names {
		names[i] = nodeName(i)
	}

	logf("building examples/hollow")
	bin, err := buildHollow(ctx, top)
	if err != nil {
		return err
	}
	audit := filepath.Join(top, "audit.log")
	auditArgs, err := writeAuditPolicy(top, audit)
	if err != nil {
		return err
	}
	logf("starting etcd + kube-apiserver (certificates for %d nodes)", o.nodes)
	started := time.Now()
	cp, err := localcp.Start(ctx, localcp.Config{Dir: filepath.Join(top, "cp"), NodeNames: names, APIServerArgs: auditArgs})
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping the control plane")
		stopCtx, cancel := context.WithTimeout(cleanupCtx, time.Minute)
		defer cancel()
		if err := cp.Stop(stopCtx); err != nil {
			logf("%v", err)
		}
	}()
	apiserverPID, err := controlPlanePID(cp.Dir, localcp.ProcAPIServer)
	if err != nil {
		return err
	}
	client, err := adminClient(ctx, cp)
	if err != nil {
		return err
	}

	logf("starting %d hollow agents", o.nodes)
	agents, err := startAgents(cp, bin, top, names, o)
	defer func() { stopAgents(agents) }()
	if err != nil {
		return err
	}
	r := &result{opts: o, apiserverPID: apiserverPID}
	if err := measure(ctx, client, agents, names, audit, r); err != nil {
		return err
	}
	r.wholeRun = time.Since(started)
	for _, a := range agents {
		r.cpuWholeRun += a.cpu()
	}
	r.apiserverCPUWholeRun = cpuSeconds(apiserverPID)
	printReport(os.Stdout, r, agents)
	return r.failures()
}

// adminClient is a client of the control plane's admin, fast enough to
// create every pod at once, with namespace default seeded.
func adminClient(ctx context.Context, cp *localcp.ControlPlane) (kubernetes.Interface, error) {
	client, err := cp.AdminClient(200, 400)
	if err != nil {
		return nil, err
	}
	if err := cp.SeedNamespace(ctx, client, "default"); err != nil {
		return nil, err
	}
	return client, nil
}

// startAgents starts a hollow agent for each name; on error it returns
// the agents it started, for the caller to stop.
func startAgents(cp *localcp.ControlPlane, bin, top string, names []string, o options) ([]*agentProc, error) {
	agents := make([]*agentProc, 0, len(names))
	for i, name := range names {
		kubeconfig, err := cp.NodeKubeconfig(name)
		if err != nil {
			return agents, err
		}
		a, err := startAgent(bin, top, name, kubeconfig, hollowNodeIP(i), max(110, o.podsPerNode+10))
		if err != nil {
			return agents, err
		}
		agents = append(agents, a)
	}
	return agents, nil
}

// measure waits for the nodes to be Ready, creates the pods, waits for
// them to run, observes the cluster and counts the agents' requests in
// the observation window, into r.
func measure(ctx context.Context, client kubernetes.Interface, agents []*agentProc, names []string, audit string, r *result) error {
	o := r.opts
	var err error
	if r.readyAfter, err = waitNodesReady(ctx, client, agents, o.timeout); err != nil {
		return err
	}
	logf("all %d nodes Ready after %v; creating %d pods", o.nodes, r.readyAfter.Round(time.Millisecond), o.nodes*o.podsPerNode)
	if err := createPods(ctx, client, names, o.podsPerNode); err != nil {
		return err
	}
	if r.runningAfter, err = waitPodsRunning(ctx, client, agents, o.nodes*o.podsPerNode, o.timeout); err != nil {
		return err
	}
	logf("all pods Running after %v; observing for %v", r.runningAfter.Round(time.Millisecond), o.duration)
	if err := observe(ctx, client, agents, r); err != nil {
		return err
	}
	r.requests, err = countRequests(audit, r.window)
	return err
}

// failures is why the run failed, after the report: agents that exited,
// nodes seen not Ready or with a stale Lease, pods not Running at the end.
func (r *result) failures() error {
	var failed []error
	if r.exited > 0 {
		failed = append(failed, fmt.Errorf("%d agents exited during the observation", r.exited))
	}
	if r.notReady > 0 || r.staleLease > 0 {
		failed = append(failed, fmt.Errorf("%d node observations not Ready, %d with a stale Lease", r.notReady, r.staleLease))
	}
	if want := r.opts.nodes * r.opts.podsPerNode; r.podsRunningEnd != want {
		failed = append(failed, fmt.Errorf("%d of %d pods Running at the end", r.podsRunningEnd, want))
	}
	return errors.Join(failed...)
}

// hollowNodeIP gives node i an address of its own in 198.18.0.0/15 (RFC
// 2544, benchmarking): the Node's InternalIP and its pods' hostIP. Nothing
// listens there; nothing dials it.
func hollowNodeIP(i int) string { return fmt.Sprintf("198.18.%d.%d", i/250, i%250+1) }

// controlPlanePID is the pid of a control-plane process, from its pidfile.
func controlPlanePID(dir, name string) (int, error) {
	procs, err := localcp.LiveProcesses(dir)
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		if p.Name == name {
			return p.PID, nil
		}
	}
	return 0, errors.New(name + " is not running")
}

// logf reports progress on stderr; the report goes to stdout.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "scale: %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
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
