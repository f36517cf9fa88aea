package localcri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// ErrNoInstance is returned (wrapped) by StopDir for a directory in which no
// instance was started.
var ErrNoInstance = errors.New("no containerd instance recorded")

// termTimeout is how long Stop waits after SIGTERM before SIGKILL.
const termTimeout = 10 * time.Second

// StopDir stops the instance recorded in dir (one started with Detach, by
// this or another process), as Containerd.Stop does.
func StopDir(ctx context.Context, dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("stop containerd: %w", err)
	}
	st, err := readState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stop containerd in %s: %w", dir, ErrNoInstance)
	}
	if err != nil {
		return fmt.Errorf("stop containerd in %s: %w", dir, err)
	}
	c := &Containerd{Dir: dir, Socket: st.Socket, st: st}
	return c.Stop(ctx)
}

// Stop removes every pod of the instance (through the CRI, so that CNI
// releases their addresses), stops containerd (SIGTERM, then SIGKILL after
// a timeout), kills the shims and containers it leaves behind, unmounts
// what is mounted under Dir and deletes the bridge. Calling it again
// returns the first result.
func (c *Containerd) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.stopErr
	}
	c.stopped = true
	c.stopErr = c.stop(ctx)
	return c.stopErr
}

func (c *Containerd) stop(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	st := c.st
	l := newLayout(st.Dir)
	var errs []error

	alive := st.PID != 0 && processMatches(st.PID, st.Config)
	if alive {
		if err := cleanupPods(ctx, st.Socket); err != nil {
			// Not fatal: what is left is killed below.
			logger.Info("Could not remove pods through the CRI", "err", err.Error())
		}
		if err := c.terminate(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := killLeftovers(ctx, st); err != nil {
		errs = append(errs, err)
	}
	// Under a systemd of its own, containerd mounted in that systemd's
	// mount namespace; those mounts go with the namespace, or here while
	// it still exists (containerd was running in it).
	if alive && len(st.Enter) > 0 {
		if err := unmountEntered(ctx, st, st.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := fsutil.UnmountUnder(st.Dir); err != nil {
		errs = append(errs, err)
	}
	if st.Bridge != "" {
		if err := deleteBridge(ctx, st.network()); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		_ = os.Remove(l.pidFile)
		_ = os.Remove(l.stateFile)
		_ = os.Remove(st.Socket)
		_ = os.Remove(l.ttrpc)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop containerd in %s: %w", st.Dir, err)
	}
	return nil
}

// terminate sends SIGTERM, waits, then SIGKILL.
func (c *Containerd) terminate(ctx context.Context) error {
	pid := c.st.PID
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal containerd (pid %d): %w", pid, err)
	}
	if c.waitExit(ctx, termTimeout) {
		return nil
	}
	klog.FromContext(ctx).Info("containerd ignored SIGTERM, killing it", "pid", pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill containerd (pid %d): %w", pid, err)
	}
	if !c.waitExit(ctx, termTimeout) {
		return fmt.Errorf("containerd (pid %d) still runs after SIGKILL", pid)
	}
	return nil
}

func (c *Containerd) waitExit(ctx context.Context, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.done != nil {
			select {
			case <-c.done:
				return true
			default:
			}
		} else if !processMatches(c.st.PID, c.st.Config) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}

// killLeftovers kills what containerd leaves when it stops: the shims (whose
// command line names this instance's socket) and the containers under them
// (found through this instance's runc root and their cgroups).
func killLeftovers(ctx context.Context, st instanceState) error {
	ids := containerIDs(st)
	shimSockets := shimSocketPaths(st, ids)
	runc := st.Runc
	if runc == "" {
		runc, _ = lookPath("runc")
	}
	if runc != "" {
		for _, id := range ids {
			_ = st.command(ctx, runc, runcArgs(st, "kill", "--all", id, "KILL")...).Run()
		}
	}
	deadline := time.Now().Add(termTimeout)
	for {
		pids := instanceProcesses(st, ids)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of the instance survive SIGKILL: %v", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("killing processes %v: %w", pids, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if runc != "" {
		// Removes runc's state and the containers' cgroups.
		for _, id := range ids {
			_ = st.command(ctx, runc, runcArgs(st, "delete", "--force", id)...).Run()
		}
	}
	// A killed shim leaves its socket (in /run/containerd/s, outside Dir).
	for _, p := range shimSockets {
		_ = os.Remove(p)
	}
	return nil
}

// runcArgs are runc's global flags for the instance's containers (its
// root; the systemd cgroup driver under a systemd of its own) and args.
func runcArgs(st instanceState, args ...string) []string {
	out := []string{"--root", filepath.Join(st.RuncRoot, "k8s.io")}
	if len(st.Enter) > 0 {
		out = append(out, "--systemd-cgroup")
	}
	return append(out, args...)
}

// shimSocketPaths reads the socket addresses the shims of the given tasks
// recorded in their bundles.
func shimSocketPaths(st instanceState, ids []string) []string {
	var out []string
	for _, id := range ids {
		data, err := os.ReadFile(filepath.Join(st.Dir, "state", "io.containerd.runtime.v2.task", "k8s.io", id, "address"))
		if err != nil {
			continue
		}
		addr := strings.TrimSpace(string(data))
		if p, ok := strings.CutPrefix(addr, "unix://"); ok && strings.HasPrefix(p, "/run/containerd/") {
			out = append(out, p)
		}
	}
	return out
}

// containerIDs lists the containers this instance's runc root and task
// state know about.
func containerIDs(st instanceState) []string {
	seen := map[string]bool{}
	for _, d := range []string{
		filepath.Join(st.RuncRoot, "k8s.io"),
		filepath.Join(st.Dir, "state", "io.containerd.runtime.v2.task", "k8s.io"),
	} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if e.IsDir() && len(e.Name()) >= 12 {
				seen[e.Name()] = true
			}
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// instanceProcesses finds live processes of the instance: shims started
// with "-address <socket>", and processes in a cgroup named after one of
// its containers.
func instanceProcesses(st instanceState, ids []string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == st.PID || !running(pid) {
			continue
		}
		if isShimOf(pid, st.Socket) || inContainerCgroup(pid, ids) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func isShimOf(pid int, socket string) bool {
	args := cmdline(pid)
	for i := 0; i+1 < len(args); i++ {
		if (args[i] == "-address" || args[i] == "--address") && args[i+1] == socket {
			return true
		}
	}
	return false
}

func inContainerCgroup(pid int, ids []string) bool {
	if len(ids) == 0 {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		i := strings.LastIndexByte(line, ':')
		if i < 0 {
			continue
		}
		base := filepath.Base(line[i+1:])
		for _, id := range ids {
			// cgroupfs: <parent>/<id>; systemd: <slice>/cri-containerd-<id>.scope
			if base == id || base == "cri-containerd-"+id+".scope" {
				return true
			}
		}
	}
	return false
}

func cmdline(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	return data[i+2] != 'Z' && data[i+2] != 'X'
}

// processMatches reports whether pid runs and is the containerd started with
// config (and not a process that reused the pid).
func processMatches(pid int, config string) bool {
	if pid <= 0 || !running(pid) {
		return false
	}
	for _, a := range cmdline(pid) {
		if a == config {
			return true
		}
	}
	return false
}
