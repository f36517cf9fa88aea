package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/internal/localcri"
)

// burstPod is one pod of the burst: busybox sleeping, the image preloaded
// in containerd and pulled only if not present (it always is).
func burstPod(i int) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-" + strconv.Itoa(i)},
		Spec: v1.PodSpec{NodeName: nodeName, TerminationGracePeriodSeconds: new(int64), Containers: []v1.Container{{
			Name: "app", Image: localcri.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent, Command: []string{"sleep", "3600"},
		}}},
	}
}

// burst creates n pods as fast as it can and returns each one's creation →
// Running latency as seen through a watch, and the time from the first
// creation until all run.
func burst(ctx context.Context, client kubernetes.Interface, a *agentProc, n int, timeout time.Duration) ([]time.Duration, time.Duration, error) {
	pods := client.CoreV1().Pods("default")
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	rv := list.ResourceVersion
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return nil, 0, err
	}
	defer func() { w.Stop() }()
	created := make(map[string]time.Time, n)
	start := time.Now()
	for i := range n {
		p := burstPod(i)
		created[p.Name] = time.Now()
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, 0, err
		}
	}
	running := make(map[string]time.Duration, n)
	deadline := time.After(timeout)
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for len(running) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				// The API server ends watches now and then: resume where
				// this one stopped.
				w.Stop()
				if w, err = pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv}); err != nil {
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
		case <-check.C:
			if a.exited() {
				return nil, 0, fmt.Errorf("the agent exited during the burst: %s", a.logTail())
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

// pct is the p-th percentile (nearest rank) of sorted durations.
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// cpuSeconds is a process's user+system CPU time, including the children
// it waited for (a kubelet runs mount, for instance), from /proc/PID/stat.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	sum := 0.0
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		v, _ := strconv.ParseFloat(f[i], 64)
		sum += v
	}
	return sum / 100 // USER_HZ
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

// resetPeakRSS sets the process's VmHWM to its current RSS, so that the
// peak read after the burst is the burst's own.
func resetPeakRSS(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset the agent's peak RSS: %w", err)
	}
	return nil
}

// writeAuditPolicy writes an audit policy that logs one event per request
// of user (stage RequestReceived, level Metadata) and nothing else, and
// returns the kube-apiserver flags that enable it with a log at logPath.
func writeAuditPolicy(dir, logPath, user string) ([]string, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	data := fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseStarted, ResponseComplete, Panic]
rules:
- level: Metadata
  users: [%q]
- level: None
`, user)
	if err := os.WriteFile(policy, []byte(data), 0o644); err != nil {
		return nil, err
	}
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + logPath,
		"--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0"}, nil
}

// window is a time interval [from, to).
type window struct{ from, to time.Time }

// requestCount is the requests received in one window.
type requestCount struct {
	total  int
	byKind map[string]int // "verb resource[/subresource]" or "verb /path"
}

// auditEvent is the part of an audit.k8s.io/v1 Event the bench reads.
type auditEvent struct {
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	RequestReceivedTimestamp metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// countRequests counts, per window, the requests of user in the audit log.
func countRequests(logPath, user string, windows []window) ([]requestCount, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	out := make([]requestCount, len(windows))
	for i := range out {
		out[i].byKind = map[string]int{}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", logPath, err)
		}
		if ev.Stage != "RequestReceived" || ev.User.Username != user {
			continue
		}
		t := ev.RequestReceivedTimestamp.Time
		for i, w := range windows {
			if !t.Before(w.from) && t.Before(w.to) {
				out[i].total++
				out[i].byKind[kind(&ev)]++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", logPath, err)
	}
	return out, nil
}

// kind names a request by verb and resource, e.g. "update leases" or
// "patch pods/status".
func kind(ev *auditEvent) string {
	if ev.ObjectRef == nil || ev.ObjectRef.Resource == "" {
		path, _, _ := strings.Cut(ev.RequestURI, "?")
		return ev.Verb + " " + path
	}
	r := ev.ObjectRef.Resource
	if ev.ObjectRef.Subresource != "" {
		r += "/" + ev.ObjectRef.Subresource
	}
	return ev.Verb + " " + r
}
