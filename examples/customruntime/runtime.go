package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// procRuntime is a nodekit.Runtime whose containers are host processes: a
// container's command and args run in a process group of their own, in a
// working directory the pod's containers share, with output appended to
// NAME.log there; the image is not used. A pod's sandbox is only a record,
// with the loopback address as pod IP (httpGet probes reach 127.0.0.1). It
// decides nothing: restarts, back-off and probes come from nodekit.
type procRuntime struct {
	dir  string
	mu   sync.Mutex
	next int
	pods map[types.UID]*procPod
}

type procPod struct {
	name, namespace string
	sandboxes       []*nodekit.SandboxStatus
	procs           []*proc // newest first
}

type proc struct {
	st   nodekit.ContainerStatus // guarded by procRuntime.mu
	cmd  *exec.Cmd
	done chan struct{} // closed once the process is reaped
}

var _ nodekit.Runtime = (*procRuntime)(nil)

func (r *procRuntime) SyncPod(ctx context.Context, req nodekit.SyncPodRequest) *nodekit.SyncResult {
	pod, a, res := req.Pod, req.Actions, &nodekit.SyncResult{}
	if a.KillPod {
		r.killPod(pod.UID, grace(pod, nil))
	}
	for id, k := range a.ContainersToKill {
		r.stop(r.find(id), grace(pod, k.GracePeriod))
		res.Add(nodekit.ActionKillContainer, k.Name, nil)
	}
	r.mu.Lock()
	if r.pods[pod.UID] == nil {
		r.pods[pod.UID] = &procPod{name: pod.Name, namespace: pod.Namespace}
	}
	p := r.pods[pod.UID]
	if a.CreateSandbox {
		r.next++
		sb := &nodekit.SandboxStatus{ID: "sandbox-" + strconv.Itoa(r.next), State: nodekit.SandboxReady,
			CreatedAt: time.Now(), IPs: []string{"127.0.0.1"}, Attempt: a.Attempt, HostNetwork: pod.Spec.HostNetwork}
		p.sandboxes = []*nodekit.SandboxStatus{sb} // the old one is gone
		res.Add(nodekit.ActionCreatePodSandbox, pod.Name, nil)
	}
	if len(p.sandboxes) > 0 {
		res.SandboxID, res.PodIPs = p.sandboxes[0].ID, p.sandboxes[0].IPs
	}
	r.mu.Unlock()
	for _, i := range a.InitContainersToStart {
		c := &pod.Spec.InitContainers[i]
		if err := r.start(pod, c, nodekit.ActionInitContainer); err != nil {
			res.Add(nodekit.ActionInitContainer, c.Name, err)
			return res
		}
		res.Add(nodekit.ActionInitContainer, c.Name, nil)
	}
	for _, i := range a.ContainersToStart {
		c := &pod.Spec.Containers[i]
		res.Add(nodekit.ActionStartContainer, c.Name, r.start(pod, c, nodekit.ActionStartContainer))
	}
	return res
}

// start runs the container's command; of its env, only plain values are set.
func (r *procRuntime) start(pod *v1.Pod, c *v1.Container, action nodekit.Action) error {
	fail := func(reason nodekit.Reason, err error) error {
		return &nodekit.ActionError{Action: action, Target: c.Name, Reason: reason, Message: err.Error(), Err: err}
	}
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(argv) == 0 {
		return fail(nodekit.ErrCreateContainerConfig, errors.New("a host process needs a command"))
	}
	dir := filepath.Join(r.dir, string(pod.UID))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fail(nodekit.ErrCreateContainer, err)
	}
	logPath := filepath.Join(dir, c.Name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fail(nodekit.ErrCreateContainer, err)
	}
	defer log.Close() // the child has its own descriptor
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, log, log
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fail(nodekit.ErrRunContainer, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, restarts := r.pods[pod.UID], 0
	for _, old := range p.procs {
		if old.st.Name == c.Name {
			restarts = old.st.RestartCount + 1 // the runtime counts restarts
			break
		}
	}
	r.next++
	now := time.Now()
	pr := &proc{cmd: cmd, done: make(chan struct{}), st: nodekit.ContainerStatus{
		ID: nodekit.ContainerID{Type: "proc", ID: strconv.Itoa(r.next)}, Name: c.Name, State: nodekit.StateRunning,
		CreatedAt: now, StartedAt: now, Image: c.Image, ImageID: "host", RestartCount: restarts, LogPath: logPath,
	}}
	p.procs = append([]*proc{pr}, p.procs...)
	go func() {
		_ = cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		r.mu.Lock()
		pr.st.State, pr.st.ExitCode, pr.st.FinishedAt, pr.st.Reason = nodekit.StateExited, code, time.Now(), "Completed"
		if code != 0 {
			pr.st.Reason = "Error"
		}
		r.mu.Unlock()
		close(pr.done)
	}()
	return nil
}

// stop sends SIGTERM to the process group, SIGKILL after the grace period,
// and returns once the process is reaped.
func (r *procRuntime) stop(pr *proc, grace time.Duration) {
	if pr == nil {
		return
	}
	select {
	case <-pr.done:
		return // reaped: its group ID may be someone else's now
	default:
	}
	_ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-pr.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGKILL)
		<-pr.done
	}
}

// grace is the override, else the deletion grace period, else the spec's.
func grace(pod *v1.Pod, override *time.Duration) time.Duration {
	switch {
	case override != nil:
		return *override
	case pod != nil && pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

func (r *procRuntime) KillPod(_ context.Context, req nodekit.KillPodRequest) error {
	if req.Running != nil {
		r.killPod(req.Running.ID, grace(req.Pod, req.GracePeriod))
	}
	return nil
}

// killPod stops the pod's processes in parallel and its sandbox.
func (r *procRuntime) killPod(uid types.UID, grace time.Duration) {
	r.mu.Lock()
	var procs []*proc
	if p := r.pods[uid]; p != nil {
		procs = p.procs
		for _, sb := range p.sandboxes {
			sb.State = nodekit.SandboxNotReady
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, pr := range procs {
		wg.Go(func() { r.stop(pr, grace) })
	}
	wg.Wait()
}

// Close kills every process still running, at once.
func (r *procRuntime) Close() {
	r.mu.Lock()
	var uids []types.UID
	for uid := range r.pods {
		uids = append(uids, uid)
	}
	r.mu.Unlock()
	for _, uid := range uids {
		r.killPod(uid, 0)
	}
}

func (r *procRuntime) find(id nodekit.ContainerID) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pods {
		for _, pr := range p.procs {
			if pr.st.ID == id {
				return pr
			}
		}
	}
	return nil
}

// ExecSync runs cmd on the host, in the container's directory and
// environment: exec probes and hooks (probes.Execer). Output is combined.
func (r *procRuntime) ExecSync(ctx context.Context, id nodekit.ContainerID, cmd []string, timeout time.Duration) ([]byte, []byte, int, error) {
	pr := r.find(id)
	if pr == nil || len(cmd) == 0 {
		return nil, nil, -1, fmt.Errorf("exec in %s: no such container, or no command", id)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Dir, c.Env = pr.cmd.Dir, pr.cmd.Env
	out, err := c.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return nil, nil, -1, fmt.Errorf("exec in %s: %w", id, ctx.Err())
	case errors.As(err, &exit):
		return out, nil, exit.ExitCode(), nil
	}
	return out, nil, 0, err
}
