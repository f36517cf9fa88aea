package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// agentStopTimeout is how long an agent gets between SIGTERM and SIGKILL.
const agentStopTimeout = 10 * time.Second

// agentProc is a running hollow agent, a child of this process.
type agentProc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process is reaped
	waitErr error         // read after done

	// Samples, taken by observe.
	cpuAtStart float64 // CPU seconds when the observation window opened
	cpuAtEnd   float64
	rssMaxKB   int64 // largest VmRSS sampled in the window
	rssEndKB   int64 // VmRSS at the end of the window
	hwmKB      int64 // VmHWM (peak RSS of the process's life) at the end
	anonEndKB  int64 // RssAnon at the end: memory of its own, not the binary's pages
	pssEndKB   int64 // Pss at the end: RssAnon plus its share of the shared pages
}

// startAgent starts one hollow agent for node name, with its pod
// directories and log under dir/agents.
func startAgent(bin, dir, name, kubeconfig, nodeIP string, maxPods int) (*agentProc, error) {
	root := filepath.Join(dir, "agents", name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	args := []string{"--kubeconfig=" + kubeconfig, "--hostname-override=" + name, "--node-ip=" + nodeIP,
		"--max-pods=" + strconv.Itoa(maxPods), "--root-dir=" + root, "--kube-api-qps=5", "--kube-api-burst=10"}
	return startChild(name, bin, args, filepath.Join(dir, "agents", name+".log"))
}

// startChild starts bin with its output in logPath. The child gets SIGKILL
// if this process dies (Pdeathsig). Pdeathsig fires when the thread that
// forked the child exits, not the process: the child is forked from a
// goroutine locked to its thread for the child's whole life, and the thread
// is unlocked (not ended) once the child is reaped.
func startChild(name, bin string, args []string, logPath string) (*agentProc, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child holds its own descriptor
	fmt.Fprintf(log, "# %s %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &agentProc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return p, nil
}

func (p *agentProc) pid() int { return p.cmd.Process.Pid }

// cpu is the agent's CPU seconds so far (or in all, once it has exited).
func (p *agentProc) cpu() float64 {
	if p.exited() && p.cmd.ProcessState != nil {
		return (p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()).Seconds()
	}
	return cpuSeconds(p.pid())
}

func (p *agentProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and, after agentStopTimeout, SIGKILL, and waits for
// the exit.
func (p *agentProc) stop() error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(agentStopTimeout):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("%s ignored SIGTERM for %v and was killed", p.name, agentStopTimeout)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) still runs after SIGKILL", p.name, p.pid())
	}
}

// stopAgents stops every agent, all at once.
func stopAgents(agents []*agentProc) {
	if len(agents) == 0 {
		return
	}
	logf("stopping %d hollow agents", len(agents))
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Go(func() {
			if err := a.stop(); err != nil {
				logf("%v", err)
			}
		})
	}
	wg.Wait()
}

// firstExited returns an agent that has exited, with its log tail, or nil.
func firstExited(agents []*agentProc) error {
	for _, a := range agents {
		if a.exited() {
			return fmt.Errorf("agent %s exited: %s", a.name, a.logTail())
		}
	}
	return nil
}

// logTail is the end of the agent's log, for error messages.
func (p *agentProc) logTail() string {
	status := "running"
	if p.exited() {
		status = fmt.Sprint(p.waitErr)
		if p.waitErr == nil {
			status = "exited with status 0"
		}
	}
	f, err := os.Open(p.logPath)
	if err != nil {
		return status
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > 8<<10 {
		_, _ = f.Seek(fi.Size()-8<<10, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return status + "\n--- last lines of " + p.logPath + " ---\n" + strings.Join(lines, "\n")
}

// buildTags are the tags upstream builds its release binaries with
// (k8s.io/kubernetes v1.37.2 hack/lib/golang.sh): grpcnotrace leaves out
// golang.org/x/net/trace, whose html/template use makes the linker keep
// every exported method of every reachable type; the hollow agent is 40%
// smaller without it, and 100s of them share the machine.
const buildTags = "selinux,notest,grpcnotrace"

// buildHollow builds examples/hollow of this checkout into dir/bin, as a
// release would be built (buildTags).
func buildHollow(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bin", "hollow")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", buildTags, "-o", bin, "./examples/hollow")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build examples/hollow: %w", err)
	}
	return bin, nil
}

// moduleRoot is the directory of this module's go.mod, found upwards from
// the working directory.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/nodekit/nodekit\n")) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod of github.com/nodekit/nodekit in %s or above: run from the checkout", wd)
		}
	}
}

// cpuSeconds is a process's user+system CPU time, including the children
// it waited for, from /proc/PID/stat; 0 if it cannot be read.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 15 {
		return 0
	}
	sum := 0.0
	for _, j := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		v, _ := strconv.ParseFloat(f[j], 64)
		sum += v
	}
	return sum / 100 // USER_HZ
}

// statusKB reads a "kB" field (VmRSS, VmHWM, RssAnon) of /proc/PID/status;
// 0 if it cannot be read.
func statusKB(pid int, key string) int64 { return procKB(pid, "status", key) }

// pssKB is the process's proportional set size (/proc/PID/smaps_rollup):
// its private memory plus its share of pages mapped by several processes,
// such as the agents' common binary.
func pssKB(pid int) int64 { return procKB(pid, "smaps_rollup", "Pss") }

// procKB reads a "key: N kB" line of /proc/PID/file; 0 if it cannot be read.
func procKB(pid int, file, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
