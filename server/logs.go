package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// ContainerLog is where one container's log is and how to tell whether it
// may still grow.
type ContainerLog struct {
	// Path is the log file, in the CRI log format.
	Path string
	// Running reports whether the container still runs (and so may still
	// write to Path); a follow stops at the end of the file once it says
	// false. Nil means the container is not running.
	Running func(ctx context.Context) (bool, error)
}

// LogLocator finds container log files.
type LogLocator interface {
	// ContainerLog returns the log of the named container of pod: its
	// current (or last) instance, or with previous the instance before
	// that, as `kubectl logs --previous`. The error, shown to the caller
	// with 400, says why there is no log (for example "container "app" in
	// pod "web" is waiting to start"). It may block on the runtime.
	ContainerLog(ctx context.Context, pod *v1.Pod, container string, previous bool) (ContainerLog, error)
}

// LogLocatorFunc adapts a function to LogLocator.
type LogLocatorFunc func(ctx context.Context, pod *v1.Pod, container string, previous bool) (ContainerLog, error)

// ContainerLog calls f.
func (f LogLocatorFunc) ContainerLog(ctx context.Context, pod *v1.Pod, container string, previous bool) (ContainerLog, error) {
	return f(ctx, pod, container, previous)
}

// PodStatusGetter reads a pod's status from the runtime; nodekit.Runtime
// satisfies it.
type PodStatusGetter interface {
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*nodekit.PodStatus, error)
}

// NewRuntimeLogs is the LogLocator over the runtime's pod status: every
// instance of a container, newest first, with its log path. The current
// log is the newest instance's (or, while that one is only created, the
// one before). The previous log is the instance before the current one —
// except when the newest instance has exited and will be restarted under
// the pod's restart policy (crash-loop back-off): then it is that exited
// instance, as upstream reports it in lastState.terminated.
func NewRuntimeLogs(rt PodStatusGetter) LogLocator {
	return LogLocatorFunc(func(ctx context.Context, pod *v1.Pod, container string, previous bool) (ContainerLog, error) {
		st, err := rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			return ContainerLog{}, fmt.Errorf("unable to read the status of pod %q: %w", pod.Name, err)
		}
		var instances []*nodekit.ContainerStatus
		for _, c := range st.Containers {
			if c.Name == container {
				instances = append(instances, c)
			}
		}
		c, err := pickLogInstance(pod, container, instances, previous)
		if err != nil {
			return ContainerLog{}, err
		}
		if c.LogPath == "" {
			return ContainerLog{}, fmt.Errorf("container %q in pod %q has no log file", container, pod.Name)
		}
		log := ContainerLog{Path: c.LogPath}
		if c.State == nodekit.StateRunning || c.State == nodekit.StateCreated {
			id := c.ID
			log.Running = func(ctx context.Context) (bool, error) {
				st, err := rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
				if err != nil {
					return false, err
				}
				for _, c := range st.Containers {
					if c.ID == id {
						return c.State == nodekit.StateRunning || c.State == nodekit.StateCreated, nil
					}
				}
				return false, nil
			}
		}
		return log, nil
	})
}

// pickLogInstance chooses among a container's instances (newest first).
func pickLogInstance(pod *v1.Pod, name string, instances []*nodekit.ContainerStatus, previous bool) (*nodekit.ContainerStatus, error) {
	if len(instances) == 0 {
		if previous {
			return nil, fmt.Errorf("previous terminated container %q in pod %q not found", name, pod.Name)
		}
		return nil, fmt.Errorf("container %q in pod %q is waiting to start - no logs yet", name, pod.Name)
	}
	newest := instances[0]
	if !previous {
		if newest.State == nodekit.StateCreated {
			if len(instances) > 1 {
				return instances[1], nil
			}
			return nil, fmt.Errorf("container %q in pod %q is waiting to start: ContainerCreating", name, pod.Name)
		}
		return newest, nil
	}
	if newest.State == nodekit.StateExited && willRestart(pod, name, newest.ExitCode) {
		return newest, nil
	}
	for _, c := range instances[1:] {
		if c.State == nodekit.StateExited || c.State == nodekit.StateUnknown {
			return c, nil
		}
	}
	return nil, fmt.Errorf("previous terminated container %q in pod %q not found", name, pod.Name)
}

// willRestart reports whether an exited container will be started again
// under the pod's (or, for sidecars, the init container's) restart policy.
func willRestart(pod *v1.Pod, name string, exitCode int) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			if podutil.IsSidecar(&c) {
				return true
			}
			return pod.Spec.RestartPolicy != v1.RestartPolicyNever && exitCode != 0
		}
	}
	switch pod.Spec.RestartPolicy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true
}

// logQuery is a parsed /containerLogs query.
type logQuery struct {
	read     logReadOptions
	previous bool
	stream   string
}

// badQueryError is a malformed query (400); invalidQueryError a well-formed
// but invalid one (422), as upstream.
type badQueryError struct{ error }
type invalidQueryError struct{ error }

// parseLogQuery reads upstream's PodLogOptions query parameters (and the
// legacy tail=N|all) relative to now.
func parseLogQuery(q url.Values, now time.Time) (logQuery, error) {
	var lq logQuery
	boolParam := func(name string) bool {
		v, ok := q[name]
		return ok && len(v) > 0 && v[0] != "0" && !strings.EqualFold(v[0], "false")
	}
	intParam := func(name string) (*int64, error) {
		v, ok := q[name]
		if !ok || len(v) == 0 {
			return nil, nil
		}
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil {
			return nil, badQueryError{fmt.Errorf("%s: %q is not an integer", name, v[0])}
		}
		return &n, nil
	}
	if tail, ok := q["tail"]; ok && len(tail) > 0 {
		q = cloneValues(q)
		if tail[0] == "all" {
			delete(q, "tailLines")
		} else {
			q["tailLines"] = tail
		}
	}
	lq.read.follow = boolParam("follow")
	lq.read.timestamps = boolParam("timestamps")
	lq.previous = boolParam("previous")
	var err error
	if lq.read.tailLines, err = intParam("tailLines"); err != nil {
		return lq, err
	}
	if lq.read.limitBytes, err = intParam("limitBytes"); err != nil {
		return lq, err
	}
	sinceSeconds, err := intParam("sinceSeconds")
	if err != nil {
		return lq, err
	}
	var sinceTime *time.Time
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return lq, badQueryError{fmt.Errorf("sinceTime: %q is not an RFC 3339 time", v)}
		}
		sinceTime = &t
	}
	lq.stream = v1.LogStreamAll
	if v := q.Get("stream"); v != "" {
		lq.stream = v
	}
	switch {
	case lq.read.tailLines != nil && *lq.read.tailLines < 0:
		return lq, invalidQueryError{fmt.Errorf("tailLines: %d must not be negative", *lq.read.tailLines)}
	case lq.read.limitBytes != nil && *lq.read.limitBytes < 1:
		return lq, invalidQueryError{fmt.Errorf("limitBytes: %d must be greater than 0", *lq.read.limitBytes)}
	case sinceSeconds != nil && sinceTime != nil:
		return lq, invalidQueryError{errors.New("at most one of sinceTime or sinceSeconds may be specified")}
	case sinceSeconds != nil && *sinceSeconds < 1:
		return lq, invalidQueryError{fmt.Errorf("sinceSeconds: %d must be greater than 0", *sinceSeconds)}
	case lq.stream != v1.LogStreamAll && lq.stream != v1.LogStreamStdout && lq.stream != v1.LogStreamStderr:
		return lq, invalidQueryError{fmt.Errorf("stream: %q is not All, Stdout or Stderr", lq.stream)}
	case lq.stream != v1.LogStreamAll && lq.read.tailLines != nil:
		return lq, invalidQueryError{errors.New("tailLines and a specific stream are mutually exclusive")}
	}
	if sinceSeconds != nil {
		lq.read.since = now.Add(-time.Duration(*sinceSeconds) * time.Second)
	}
	if sinceTime != nil && sinceTime.After(lq.read.since) {
		lq.read.since = *sinceTime
	}
	return lq, nil
}

func cloneValues(q url.Values) url.Values {
	c := make(url.Values, len(q))
	for k, v := range q {
		c[k] = v
	}
	return c
}

// flushWriter flushes the response after every write, so followers see
// lines as they come.
type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil {
		return n, err
	}
	if err := f.rc.Flush(); err != nil {
		return n, err
	}
	return n, nil
}

// containerLogs serves GET /containerLogs/{namespace}/{pod}/{container}.
func (s *Server) containerLogs(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ns, name, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	lq, err := parseLogQuery(r.URL.Query(), s.clock.Now())
	if err != nil {
		code := http.StatusBadRequest
		if errors.As(err, new(invalidQueryError)) {
			code = http.StatusUnprocessableEntity
		}
		http.Error(w, "invalid log request: "+err.Error(), code)
		return
	}
	pod, ok := s.findPod(ns, name)
	if !ok {
		http.Error(w, fmt.Sprintf("pod %q does not exist", name), http.StatusNotFound)
		return
	}
	if !hasContainer(pod, container) {
		http.Error(w, fmt.Sprintf("container %q not found in pod %q", container, name), http.StatusNotFound)
		return
	}
	if s.logs == nil {
		http.Error(w, "container logs are not available: the node agent serves no log locator", http.StatusServiceUnavailable)
		return
	}
	loc, err := s.logs.ContainerLog(ctx, pod, container, lq.previous)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f, err := os.Open(loc.Path)
	if err != nil {
		http.Error(w, fmt.Sprintf("unable to open the log of container %q in pod %q: %v", container, name, err), http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush() // a follower learns at once that the log is there
	fw := flushWriter{w: w, rc: rc}
	var stdout, stderr io.Writer = fw, fw
	switch lq.stream {
	case v1.LogStreamStdout:
		stderr = nil
	case v1.LogStreamStderr:
		stdout = nil
	}
	logger := klog.FromContext(ctx)
	if err := followLog(ctx, s.clock, f, loc.Path, lq.read, loc.Running, stdout, stderr, logger); err != nil && ctx.Err() == nil {
		logger.V(2).Info("Container log read ended with an error", "pod", klog.KObj(pod), "container", container, "err", err)
	}
}

// hasContainer reports whether pod's spec has a container (regular, init
// or ephemeral) of that name.
func hasContainer(pod *v1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}
