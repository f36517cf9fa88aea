package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/internal/cgroot"
	"github.com/nodekit/nodekit/internal/localcp"
)

const (
	// settleIdle is how long the agent runs after the node is Ready before
	// the 0-pod RSS is read and the burst starts.
	settleIdle = 5 * time.Second
	// settleSteady is how long after the last pod runs the steady window
	// starts, so the agent has published the burst's statuses.
	settleSteady = 10 * time.Second
	readyTimeout = 2 * time.Minute
	stopTimeout  = 30 * time.Second
)

// result is what one agent measured.
type result struct {
	agent      string
	p50, p99   time.Duration
	allRunning time.Duration
	cpuSeconds float64
	peakKB     int64
	idle0KB    int64
	idleNKB    int64
	// anon0KB and anonNKB are the anonymous part of idle0KB and idleNKB
	// (RssAnon: heap, stacks); the rest is mapped files, mostly the
	// agent's own binary.
	anon0KB, anonNKB int64
	burstRequests    int
	burstByKind      map[string]int
	steadyRequests   int
	steadyWindow     time.Duration
	steadyByKind     map[string]int
	runtime          string // the run's runtime and its version (benchNode.runtime)
	start            startBreakdown
	// steadyCPU is the agent's CPU seconds in the steady window.
	steadyCPU float64
	// pull is what the registry and the events say of the pulls (--pull).
	pull *pullFigures
	// goroutines0 and goroutinesN are the agent's goroutines with 0 pods
	// and at the end of the steady window; -1 when not read.
	goroutines0, goroutinesN int
	// build is the build tags of the agent's binary ("" for the ideal
	// agent, the bench itself).
	build string
}

// steadyCPUPerMinute is the agent's CPU seconds per minute of the steady
// window, all pods running.
func (r *result) steadyCPUPerMinute() float64 {
	return r.steadyCPU / r.steadyWindow.Minutes()
}

func (r *result) steadyPerMinute() float64 {
	return float64(r.steadyRequests) / r.steadyWindow.Minutes()
}

// runOne starts a control plane, the runtime (startNode) and the agent in
// dir, runs the workload and stops everything again, in this order: agent,
// runtime (containerd removes the pods), the mounts the agent left, the
// agent's cgroups, the control plane.
func runOne(ctx context.Context, agent, bin, dir string, o options) (*result, error) {
	cleanupCtx := context.WithoutCancel(ctx)
	cp, audit, err := startControlPlane(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cp.Stop(cleanupCtx) }()
	var cg *cgroot.Root
	defer func() {
		if cg != nil {
			if err := cg.Remove(); err != nil {
				logf("%s: %v", agent, err)
			}
		}
	}()
	defer unmountBelow(dir)
	node, err := startNode(ctx, o, filepath.Join(dir, "cri"))
	if err != nil {
		return nil, err
	}
	defer func() {
		logf("%s: stopping the runtime and removing the pods", agent)
		if err := node.stop(cleanupCtx); err != nil {
			logf("%s: %v", agent, err)
		}
	}()

	client, err := adminClient(ctx, cp)
	if err != nil {
		return nil, err
	}
	// Both agents keep their kubepods tree under a cgroup of the bench's
	// own, so neither can touch pods of anything else on the machine (the
	// ideal agent makes none).
	if !isIdeal(agent) {
		if cg, err = cgroot.Create(filepath.Base(filepath.Dir(dir)) + "-" + agent); err != nil {
			return nil, err
		}
	}
	kubeconfig, err := cp.NodeKubeconfig(nodeName)
	if err != nil {
		return nil, err
	}
	a, err := startAgent(agent, bin, dir, kubeconfig, cp.CAFile, node, cg, o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := a.stop(stopTimeout); err != nil {
			logf("%s: %v", agent, err)
		}
	}()
	logf("%s: started (pid %d), waiting for node %s to be Ready", agent, a.pid(), nodeName)
	return measureAgent(ctx, cp, client, a, node, audit, o)
}

// startControlPlane starts a control plane in dir whose API server logs
// the node's requests to the returned audit log.
func startControlPlane(ctx context.Context, dir string) (*localcp.ControlPlane, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	audit := filepath.Join(dir, "audit.log")
	auditArgs, err := writeAuditPolicy(dir, audit, "system:node:"+nodeName)
	if err != nil {
		return nil, "", err
	}
	cp, err := localcp.Start(ctx, localcp.Config{Dir: filepath.Join(dir, "cp"), NodeNames: []string{nodeName}, APIServerArgs: auditArgs})
	if err != nil {
		return nil, "", err
	}
	return cp, audit, nil
}

// adminClient is a client of the control plane's admin, with namespace
// default seeded.
func adminClient(ctx context.Context, cp *localcp.ControlPlane) (kubernetes.Interface, error) {
	client, err := cp.AdminClient(1000, 1000) // create the burst as fast as the API server takes it
	if err != nil {
		return nil, err
	}
	if err := cp.SeedNamespace(ctx, client, "default"); err != nil {
		return nil, err
	}
	return client, nil
}

// measureAgent waits for the agent's node to be Ready, measures it
// (measure) and adds what the runtime and its registry say.
func measureAgent(ctx context.Context, cp *localcp.ControlPlane, client kubernetes.Interface, a *agentProc, node *benchNode, audit string, o options) (*result, error) {
	if err := waitNodeReady(ctx, client, a); err != nil {
		return nil, err
	}
	gr, err := newGoroutineReader(cp.Admin)
	if err != nil {
		return nil, err
	}
	r, err := measure(ctx, client, gr, a, audit, o)
	if err != nil {
		return nil, err
	}
	r.runtime = node.runtime
	if node.registryLog != "" {
		if r.pull, err = readPullFigures(audit, node.registryLog, "system:node:"+nodeName); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// measure runs the burst and the steady window against a Ready node.
func measure(ctx context.Context, client kubernetes.Interface, gr *goroutineReader, a *agentProc, audit string, o options) (*result, error) {
	r := &result{agent: a.name}
	pid := a.pid()
	if err := sleep(ctx, settleIdle); err != nil {
		return nil, err
	}
	r.idle0KB, r.anon0KB = rssKB(pid), anonRSSKB(pid)
	r.goroutines0 = gr.count(ctx, a)
	saveResidency(o, a, 0)
	if o.keep {
		gr.saveHeap(ctx, a, filepath.Join(filepath.Dir(a.logPath), "heap-0-pods.pb.gz"))
	}
	if err := resetPeakRSS(pid); err != nil {
		return nil, err
	}
	cpu0 := cpuSeconds(pid)
	var profiled sync.WaitGroup
	if o.burstProfile > 0 {
		profiled.Go(func() {
			gr.saveCPUProfile(ctx, a, o.burstProfile, filepath.Join(filepath.Dir(a.logPath), "cpu-burst.pb.gz"))
		})
	}
	if o.burstTrace > 0 {
		profiled.Go(func() {
			gr.saveTrace(ctx, a, o.burstTrace, filepath.Join(filepath.Dir(a.logPath), "trace-burst.out"))
		})
	}
	logf("%s: creating %d pods", a.name, o.pods)
	burstStart := time.Now()
	times, total, err := burst(ctx, client, a, o.pods, burstImages(o), o.timeout)
	if err != nil {
		return nil, err
	}
	burstEnd := time.Now()
	r.cpuSeconds = cpuSeconds(pid) - cpu0
	r.peakKB = peakRSSKB(pid)
	if o.keep {
		// What is live as the last pod runs: the burst's own share of the peak.
		gr.saveHeap(ctx, a, filepath.Join(filepath.Dir(a.logPath), "heap-burst-end.pb.gz"))
	}
	lat := latencies(times)
	r.p50, r.p99, r.allRunning = pct(lat, 50), pct(lat, 99), total
	logf("%s: all %d pods Running after %v; steady window of %v starts in %v", a.name, o.pods, total.Round(time.Millisecond), o.steady, settleSteady)

	profiled.Wait()
	if err := sleep(ctx, settleSteady); err != nil {
		return nil, err
	}
	if o.keep {
		// With heap-N-pods.pb.gz, what the steady window allocated:
		// go tool pprof -sample_index=alloc_space -base heap-steady-start.pb.gz heap-N-pods.pb.gz
		gr.saveHeap(ctx, a, filepath.Join(filepath.Dir(a.logPath), "heap-steady-start.pb.gz"))
	}
	steadyStart, steadyCPU0 := time.Now(), cpuSeconds(pid)
	if err := sleep(ctx, o.steady); err != nil {
		return nil, err
	}
	steadyEnd := time.Now()
	r.steadyCPU = cpuSeconds(pid) - steadyCPU0
	r.idleNKB, r.anonNKB = rssKB(pid), anonRSSKB(pid)
	r.goroutinesN = gr.count(ctx, a)
	saveResidency(o, a, o.pods)
	if o.keep {
		gr.saveHeap(ctx, a, filepath.Join(filepath.Dir(a.logPath), "heap-"+strconv.Itoa(o.pods)+"-pods.pb.gz"))
		gr.save(ctx, a, "/debug/pprof/heap?debug=1", "heap profile with runtime.MemStats", filepath.Join(filepath.Dir(a.logPath), "heap-"+strconv.Itoa(o.pods)+"-pods.txt"))
	}
	if a.exited() {
		return nil, fmt.Errorf("the agent exited during the steady window: %s", a.logTail())
	}
	if err := allStillRunning(ctx, client, o.pods); err != nil {
		return nil, err
	}
	r.steadyWindow = steadyEnd.Sub(steadyStart)
	// The log backend writes each event before the request is served, but
	// give the last ones a moment anyway.
	if err := sleep(ctx, time.Second); err != nil {
		return nil, err
	}
	counts, err := countRequests(audit, "system:node:"+nodeName, []window{{burstStart, burstEnd}, {steadyStart, steadyEnd}})
	if err != nil {
		return nil, err
	}
	r.burstRequests, r.burstByKind, r.steadyRequests, r.steadyByKind = counts[0].total, counts[0].byKind, counts[1].total, counts[1].byKind
	if err := podRequests(audit, "system:node:"+nodeName, times); err != nil {
		return nil, err
	}
	r.start = startStages(times)
	return r, nil
}

// saveResidency writes, with --residency, where the agent's resident
// binary pages are (printResidency) to residency-N-pods.md beside its log.
func saveResidency(o options, a *agentProc, pods int) {
	if !o.residency {
		return
	}
	path := filepath.Join(filepath.Dir(a.logPath), "residency-"+strconv.Itoa(pods)+"-pods.md")
	f, err := os.Create(path)
	if err == nil {
		err = printResidency(f, a.pid(), "", 40)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		logf("%s: residency: %v", a.name, err)
		return
	}
	logf("%s: resident pages by package written to %s", a.name, path)
}

func waitNodeReady(ctx context.Context, client kubernetes.Interface, a *agentProc) error {
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		if a.exited() {
			return fmt.Errorf("the agent exited before the node was Ready: %s", a.logTail())
		}
		if n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					return nil
				}
			}
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("node %s not Ready within %v: %s", nodeName, readyTimeout, a.logTail())
}

// allStillRunning checks that the burst's pods still run after the steady
// window (a crash loop would make the figures meaningless).
func allStillRunning(ctx context.Context, client kubernetes.Interface, n int) error {
	list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	running := 0
	for _, p := range list.Items {
		if p.Status.Phase != v1.PodRunning {
			continue
		}
		restarts := int32(0)
		for _, cs := range p.Status.ContainerStatuses {
			restarts += cs.RestartCount
		}
		if restarts > 0 {
			return fmt.Errorf("pod %s restarted %d times during the bench", p.Name, restarts)
		}
		running++
	}
	if running != n {
		return fmt.Errorf("%d of %d pods Running after the steady window", running, n)
	}
	return nil
}
