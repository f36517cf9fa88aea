package main

import (
	"bufio"
	"bytes"
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
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// burstPod is one pod of the burst: busybox sleeping, pulled only if not
// present (the preloaded image always is; with --pull none is at first).
func burstPod(i int, image string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-" + strconv.Itoa(i)},
		Spec: v1.PodSpec{NodeName: nodeName, TerminationGracePeriodSeconds: new(int64), Containers: []v1.Container{{
			Name: "app", Image: image, ImagePullPolicy: v1.PullIfNotPresent, Command: []string{"sleep", "3600"},
		}}},
	}
}

// podTimes is when one pod of the burst passed each point of its start,
// all on this machine's clock: created and runningSeen by the bench (just
// before its create call, and when its watch showed the pod Running),
// firstRequest and runningPatch from the audit log (the API server's
// requestReceivedTimestamp of the agent's first request naming the pod,
// and of the status write that set it Running).
type podTimes struct {
	created, firstRequest, runningPatch, runningSeen time.Time
	firstKind                                        string // the first request's verb and resource
}

// burst creates n pods as fast as it can and returns when each was created
// and seen Running through a watch, and the time from the first creation
// until all run. The watch is read while the pods are being created, so a
// pod that runs before the last is created is timed when it runs.
func burst(ctx context.Context, client kubernetes.Interface, a *agentProc, n int, images []string, timeout time.Duration) (map[string]*podTimes, time.Duration, error) {
	pods := client.CoreV1().Pods("default")
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := make(chan runningPod, n)
	watchErr := make(chan error, 1)
	go func() { watchErr <- watchRunning(ctx, pods, list.ResourceVersion, seen) }()
	times := make(map[string]*podTimes, n)
	start := time.Now()
	for i := range n {
		p := burstPod(i, images[i%len(images)])
		times[p.Name] = &podTimes{created: time.Now()}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, 0, err
		}
	}
	running := 0
	deadline := time.After(timeout)
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for running < n {
		select {
		case r := <-seen:
			if t, ok := times[r.name]; ok && t.runningSeen.IsZero() {
				t.runningSeen = r.at
				running++
			}
		case err := <-watchErr:
			return nil, 0, fmt.Errorf("watch pods: %w", err)
		case <-check.C:
			if a.exited() {
				return nil, 0, fmt.Errorf("the agent exited during the burst: %s", a.logTail())
			}
		case <-deadline:
			return nil, 0, fmt.Errorf("%d of %d pods Running after %v", running, n, timeout)
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	return times, time.Since(start), nil
}

// runningPod is a pod a watch showed Running, and when.
type runningPod struct {
	name string
	at   time.Time
}

// watchRunning watches pods from resourceVersion rv and sends each pod the
// first time it shows Running, until ctx ends. It resumes a watch the API
// server ended.
func watchRunning(ctx context.Context, pods typedcorev1.PodInterface, rv string, out chan<- runningPod) error {
	sent := map[string]bool{}
	for {
		w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.Pod)
			if !ok || (ev.Type != watch.Modified && ev.Type != watch.Added) {
				continue
			}
			rv = p.ResourceVersion
			if sent[p.Name] || p.Status.Phase != v1.PodRunning {
				continue
			}
			sent[p.Name] = true
			select {
			case out <- runningPod{p.Name, time.Now()}:
			case <-ctx.Done():
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil
		}
	}
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
func anonRSSKB(pid int) int64 { return statusKB(pid, "RssAnon") }

// resetPeakRSS sets the process's VmHWM to its current RSS, so that the
// peak read after the burst is the burst's own.
func resetPeakRSS(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset the agent's peak RSS: %w", err)
	}
	return nil
}

// writeAuditPolicy writes an audit policy that logs one event per request
// of user (stage RequestReceived, level Metadata) and, for its writes of
// pod status, its service-account token requests and its events, also the
// ResponseComplete event with the request's body (level Request), so the
// bench can tell which write set a pod Running and which pod a token or
// an event was for; nothing else. It returns the kube-apiserver flags that enable it with a
// log at logPath.
func writeAuditPolicy(dir, logPath, user string) ([]string, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	data := fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseStarted, Panic]
rules:
- level: Request
  users: [%[1]q]
  verbs: [patch, update]
  resources: [{group: "", resources: [pods/status]}]
- level: Request
  users: [%[1]q]
  verbs: [create]
  resources: [{group: "", resources: [serviceaccounts/token, events]}, {group: events.k8s.io, resources: [events]}]
- level: Metadata
  users: [%[1]q]
  omitStages: [ResponseComplete]
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
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject            json.RawMessage  `json:"requestObject"`
	RequestReceivedTimestamp metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// scanAudit calls fn for each event of the audit log, in order.
func scanAudit(logPath string, fn func(*auditEvent)) error {
	f, err := os.Open(logPath)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("audit log %s: %w", logPath, err)
		}
		fn(&ev)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("audit log %s: %w", logPath, err)
	}
	return nil
}

// countRequests counts, per window, the requests of user in the audit log.
func countRequests(logPath, user string, windows []window) ([]requestCount, error) {
	out := make([]requestCount, len(windows))
	for i := range out {
		out[i].byKind = map[string]int{}
	}
	err := scanAudit(logPath, func(ev *auditEvent) {
		if ev.Stage != "RequestReceived" || ev.User.Username != user {
			return
		}
		t := ev.RequestReceivedTimestamp.Time
		for i, w := range windows {
			if !t.Before(w.from) && t.Before(w.to) {
				out[i].total++
				out[i].byKind[kind(ev)]++
			}
		}
	})
	return out, err
}

// podRequests fills, for the pods of times in namespace default, the first
// request of user about the pod (naming it, or a token request bound to
// it, or an event about it) and the first successful status write of user
// that set it Running.
func podRequests(logPath, user string, times map[string]*podTimes) error {
	return scanAudit(logPath, func(ev *auditEvent) {
		ref := ev.ObjectRef
		if ev.User.Username != user || ref == nil || ref.Namespace != "default" {
			return
		}
		name := ""
		switch {
		case ref.Resource == "pods":
			name = ref.Name
		case ev.Stage == "ResponseComplete":
			name = podNamedIn(ev.RequestObject)
		}
		t, ok := times[name]
		if !ok {
			return
		}
		at := ev.RequestReceivedTimestamp.Time
		if (ev.Stage == "RequestReceived" || ref.Resource != "pods") && (t.firstRequest.IsZero() || at.Before(t.firstRequest)) {
			t.firstRequest, t.firstKind = at, kind(ev)
		}
		if ev.Stage == "ResponseComplete" && ref.Resource == "pods" && ref.Subresource == "status" {
			ok := ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300
			if ok && setsRunning(ev.RequestObject) && (t.runningPatch.IsZero() || at.Before(t.runningPatch)) {
				t.runningPatch = at
			}
		}
	})
}

// podNamedIn is the pod a token request is bound to, or an event (core or
// events.k8s.io) is about; "" for anything else.
func podNamedIn(body json.RawMessage) string {
	if len(body) == 0 {
		return ""
	}
	type objRef struct{ Kind, Name string }
	var b struct {
		Spec struct {
			BoundObjectRef *objRef `json:"boundObjectRef"`
		} `json:"spec"`
		InvolvedObject *objRef `json:"involvedObject"`
		Regarding      *objRef `json:"regarding"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	for _, r := range []*objRef{b.Spec.BoundObjectRef, b.InvolvedObject, b.Regarding} {
		if r != nil && r.Kind == "Pod" {
			return r.Name
		}
	}
	return ""
}

// setsRunning reports whether a pod status write (a patch, or a whole pod)
// sets the phase Running.
func setsRunning(body json.RawMessage) bool {
	var b bytes.Buffer
	if len(body) == 0 || json.Compact(&b, body) != nil {
		return false
	}
	return bytes.Contains(b.Bytes(), []byte(`"phase":"Running"`))
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
