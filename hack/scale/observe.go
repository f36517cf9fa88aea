package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// busybox is the pods' image; hollow nodes never pull it.
const busybox = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"

// result is what a run measured.
type result struct {
	opts                     options
	apiserverPID             int
	readyAfter, runningAfter time.Duration // from the agents' start, from the pods' creation
	window                   window        // the observation window
	wholeRun                 time.Duration // from the control plane's start to the end of the window

	observations   int // node × check
	notReady       int // observations of a node not Ready (or missing)
	staleLease     int // observations of a Lease missing or older than its duration
	maxLeaseAge    time.Duration
	exited         int // agents that exited during the window
	podsRunningEnd int // pods Running at the end of the window

	cpuWholeRun          float64 // all agents, whole run
	apiserverCPUWindow   float64
	apiserverCPUWholeRun float64
	apiserverRSSMaxKB    int64 // largest VmRSS sampled in the window
	apiserverRSSEndKB    int64
	requests             map[string]*userRequests // by user, in the window
}

// readyNodes returns the names of the Ready nodes.
func readyNodes(ctx context.Context, client kubernetes.Interface) (map[string]bool, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
				out[n.Name] = true
			}
		}
	}
	return out, nil
}

// waitNodesReady waits until every agent's node is Ready and returns how
// long that took.
func waitNodesReady(ctx context.Context, client kubernetes.Interface, agents []*agentProc, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ready := 0
	for time.Since(start) < timeout {
		if err := firstExited(agents); err != nil {
			return 0, err
		}
		got, err := readyNodes(ctx, client)
		if err == nil {
			if ready = len(got); ready == len(agents) {
				return time.Since(start), nil
			}
		}
		if err := sleep(ctx, time.Second); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%d of %d nodes Ready after %v; last agent: %s", ready, len(agents), timeout, agents[len(agents)-1].logTail())
}

// createPods binds perNode pods to each node, 8 creations at a time.
func createPods(ctx context.Context, client kubernetes.Interface, nodes []string, perNode int) error {
	type job struct {
		node string
		i    int
	}
	jobs := make(chan job)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for j := range jobs {
				p := &v1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-pod-%03d", j.node, j.i)},
					Spec: v1.PodSpec{NodeName: j.node, Containers: []v1.Container{{
						Name: "app", Image: busybox, Command: []string{"sleep", "infinity"},
					}}},
				}
				if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- fmt.Errorf("create pod %s: %w", p.Name, err):
					default:
					}
				}
			}
		})
	}
	for _, n := range nodes {
		for i := range perNode {
			jobs <- job{n, i}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// runningPods counts the pods Running with a pod IP.
func runningPods(ctx context.Context, client kubernetes.Interface) (int, error) {
	list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range list.Items {
		if p.Status.Phase == v1.PodRunning && p.Status.PodIP != "" {
			n++
		}
	}
	return n, nil
}

// waitPodsRunning waits until want pods run and returns how long that took.
func waitPodsRunning(ctx context.Context, client kubernetes.Interface, agents []*agentProc, want int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	got := 0
	for time.Since(start) < timeout {
		if err := firstExited(agents); err != nil {
			return 0, err
		}
		if n, err := runningPods(ctx, client); err == nil {
			if got = n; got >= want {
				return time.Since(start), nil
			}
		}
		if err := sleep(ctx, time.Second); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%d of %d pods Running after %v", got, want, timeout)
}

// observe checks the nodes, their Leases and the processes every
// observeEvery for the run's duration (the first check at once, the last
// at the end), filling r.
func observe(ctx context.Context, client kubernetes.Interface, agents []*agentProc, r *result) error {
	for _, a := range agents {
		a.cpuAtStart = a.cpu()
	}
	apiCPU0 := cpuSeconds(r.apiserverPID)
	r.window.from = time.Now()
	end := r.window.from.Add(r.opts.duration)
	for {
		if err := check(ctx, client, agents, r); err != nil {
			return err
		}
		left := time.Until(end)
		if left <= 0 {
			break
		}
		if err := sleep(ctx, min(observeEvery, left)); err != nil {
			return err
		}
	}
	r.window.to = time.Now()
	r.apiserverCPUWindow = cpuSeconds(r.apiserverPID) - apiCPU0
	for _, a := range agents {
		a.cpuAtEnd = a.cpu()
		a.rssEndKB = statusKB(a.pid(), "VmRSS")
		a.hwmKB = statusKB(a.pid(), "VmHWM")
		a.anonEndKB = statusKB(a.pid(), "RssAnon")
		a.pssEndKB = pssKB(a.pid())
		if a.exited() {
			r.exited++
		}
	}
	r.apiserverRSSEndKB = statusKB(r.apiserverPID, "VmRSS")
	var err error
	r.podsRunningEnd, err = runningPods(ctx, client)
	return err
}

// check is one observation: every node Ready, every Lease fresh, RSS.
func check(ctx context.Context, client kubernetes.Interface, agents []*agentProc, r *result) error {
	ready, err := readyNodes(ctx, client)
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	leases, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list leases: %w", err)
	}
	now := time.Now()
	fresh := map[string]bool{}
	for _, l := range leases.Items {
		if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			continue
		}
		age := now.Sub(l.Spec.RenewTime.Time)
		r.maxLeaseAge = max(r.maxLeaseAge, age)
		fresh[l.Name] = age <= time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second
	}
	missed := 0
	for _, a := range agents {
		r.observations++
		if !ready[a.name] || a.exited() {
			r.notReady++
			missed++
		}
		if !fresh[a.name] {
			r.staleLease++
		}
		a.rssMaxKB = max(a.rssMaxKB, statusKB(a.pid(), "VmRSS"))
	}
	r.apiserverRSSMaxKB = max(r.apiserverRSSMaxKB, statusKB(r.apiserverPID, "VmRSS"))
	if missed > 0 {
		logf("observation: %d of %d nodes not Ready", missed, len(agents))
	}
	return nil
}
