// Command bench measures how fast a node agent starts a burst of pods on a
// real runtime: it starts a private etcd + kube-apiserver and containerd,
// runs the agent as a child process, creates N pods at once (busybox,
// preloaded image) and reports, per pod, the time from creation to Running
// as watched from the API server, plus the agent's CPU seconds and peak RSS
// during the burst and its idle RSS before and after.
//
//	go run ./hack/bench [--pods 100] [--agent fullagent]
//
// Everything runs on loopback and on the bench's own pod bridge; it stops
// what it started when done.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/internal/localcp"
	"github.com/nodekit/nodekit/internal/localcri"
)

const nodeName = "bench-node"

func main() {
	pods := flag.Int("pods", 100, "pods to create at once")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long to wait for all pods to run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *pods, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int, timeout time.Duration) error {
	dir, err := os.MkdirTemp("", "nkbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cp, err := localcp.Start(ctx, localcp.Config{Dir: filepath.Join(dir, "cp"), NodeNames: []string{nodeName}})
	if err != nil {
		return err
	}
	defer cp.Stop(context.WithoutCancel(ctx))
	cri, err := localcri.Start(ctx, localcri.Config{Dir: filepath.Join(dir, "cri")})
	if err != nil {
		return err
	}
	defer cri.Stop(context.WithoutCancel(ctx))
	client, err := kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		return err
	}
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}

	agent, err := startAgent(ctx, dir, cp, cri)
	if err != nil {
		return err
	}
	defer func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		_ = agent.Wait()
	}()
	if err := waitNodeReady(ctx, client); err != nil {
		return err
	}
	time.Sleep(5 * time.Second) // let start-up settle before the idle reading
	idle0 := rssKB(agent.Process.Pid)
	cpu0 := cpuSeconds(agent.Process.Pid)

	latencies, total, err := burst(ctx, client, n, timeout)
	if err != nil {
		return err
	}
	cpu := cpuSeconds(agent.Process.Pid) - cpu0
	peak := peakRSSKB(agent.Process.Pid)
	time.Sleep(10 * time.Second)
	idleN := rssKB(agent.Process.Pid)

	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	fmt.Printf("agent            fullagent\n")
	fmt.Printf("pods             %d\n", n)
	fmt.Printf("startup p50      %v\n", pct(latencies, 50).Round(time.Millisecond))
	fmt.Printf("startup p99      %v\n", pct(latencies, 99).Round(time.Millisecond))
	fmt.Printf("all running      %v\n", total.Round(time.Millisecond))
	fmt.Printf("agent cpu        %.2fs during the burst\n", cpu)
	fmt.Printf("agent peak rss   %d MiB\n", peak/1024)
	fmt.Printf("idle rss 0 pods  %d MiB\n", idle0/1024)
	fmt.Printf("idle rss %d pods %d MiB\n", n, idleN/1024)
	return nil
}

func startAgent(ctx context.Context, dir string, cp *localcp.ControlPlane, cri *localcri.Containerd) (*exec.Cmd, error) {
	bin := filepath.Join(dir, "fullagent")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/fullagent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build fullagent: %w", err)
	}
	kubeconfig, err := cp.NodeKubeconfig(nodeName)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\npodLogsDir: %s\nmaxPods: 250\n", filepath.Join(dir, "logs"))), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--config", cfg, "--hostname-override", nodeName,
		"--node-ip", cri.Gateway.String(), "--root-dir", filepath.Join(dir, "root"), "--container-runtime-endpoint", cri.Endpoint)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, cmd.Start()
}

func waitNodeReady(ctx context.Context, client kubernetes.Interface) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					return nil
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("node %s not Ready within 60s", nodeName)
}

// burst creates n pods as fast as it can and returns each one's creation →
// Running latency as seen through a watch.
func burst(ctx context.Context, client kubernetes.Interface, n int, timeout time.Duration) ([]time.Duration, time.Duration, error) {
	list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	rv := list.ResourceVersion
	w, err := client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return nil, 0, err
	}
	defer func() { w.Stop() }()
	created := make(map[string]time.Time, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		name := "bench-" + strconv.Itoa(i)
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PodSpec{NodeName: nodeName, TerminationGracePeriodSeconds: new(int64), Containers: []v1.Container{{
				Name: "app", Image: localcri.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sleep", "3600"},
			}}},
		}
		created[name] = time.Now()
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, 0, err
		}
	}
	running := map[string]time.Duration{}
	deadline := time.After(timeout)
	for len(running) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				// The API server ends watches now and then: resume where
				// this one stopped.
				w.Stop()
				if w, err = client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{ResourceVersion: rv}); err != nil {
					return nil, 0, err
				}
				continue
			}
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			p := ev.Object.(*v1.Pod)
			rv = p.ResourceVersion
			if _, seen := running[p.Name]; seen || p.Status.Phase != v1.PodRunning {
				continue
			}
			if t, ok := created[p.Name]; ok {
				running[p.Name] = time.Since(t)
			}
		case <-deadline:
			return nil, 0, fmt.Errorf("%d of %d pods Running after %v", len(running), n, timeout)
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	total := time.Since(start)
	out := make([]time.Duration, 0, n)
	for _, d := range running {
		out = append(out, d)
	}
	return out, total, nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// cpuSeconds is a process's user+system CPU time from /proc/PID/stat.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

func statusKB(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key+":") {
			v, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return v
		}
	}
	return 0
}

func rssKB(pid int) int64     { return statusKB(pid, "VmRSS") }
func peakRSSKB(pid int) int64 { return statusKB(pid, "VmHWM") }
