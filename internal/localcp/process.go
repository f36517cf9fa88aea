package localcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// Process names; they are also the names of the pidfiles (Dir/NAME.pid) and
// logs (Dir/logs/NAME.log).
const (
	ProcAPIServer = "kube-apiserver"
	ProcEtcd      = "etcd"
)

const (
	// stopGrace is how long a process gets between SIGTERM and SIGKILL.
	stopGrace = 15 * time.Second
	// killWait bounds the wait for a process to vanish after SIGKILL.
	killWait    = 10 * time.Second
	pollEvery   = 50 * time.Millisecond
	tailLines   = 40
	tailMaxRead = 32 << 10
)

// stopOrder lists the processes in the order they are stopped: the
// optional controllers, then the API server, so it never runs without its
// storage.
func stopOrder() []string {
	return []string{ProcScheduler, ProcControllerManager, ProcAPIServer, ProcEtcd}
}

// Process is a control-plane process found through its pidfile.
type Process struct {
	Name string // ProcAPIServer, ProcEtcd, ProcControllerManager or ProcScheduler
	PID  int
}

// proc is one process of a control plane.
type proc struct {
	name    string
	pid     int
	dir     string        // state dir, for the identity check of pidfile processes
	done    chan struct{} // closed once reaped; nil if this process did not start it
	waitErr error         // exit status; read only after done is closed
}

func pidFilePath(dir, name string) string { return filepath.Join(dir, name+".pid") }

// LogPath returns where the output of process name goes.
func LogPath(dir, name string) string { return filepath.Join(dir, "logs", name+".log") }

// startProc starts bin with args (ctx is only used to clean up on failure;
// it does not bound the process's life), output to its log file (truncated), and
// writes its pidfile. A detached process gets its own session, so it
// survives the caller and the caller's terminal; any other gets SIGKILL when
// the caller dies (Pdeathsig).
func startProc(ctx context.Context, dir, name, bin string, args []string, detach bool) (*proc, error) {
	return startProcLog(ctx, dir, name, bin, args, detach, os.O_TRUNC)
}

// startProcLog is startProc with the log opened with the extra flag
// logMode: os.O_TRUNC for a fresh log, os.O_APPEND to keep what an earlier
// run of the process wrote (a restart).
func startProcLog(ctx context.Context, dir, name, bin string, args []string, detach bool, logMode int) (*proc, error) {
	logPath := LogPath(dir, name)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("start %s: create log dir: %w", name, err)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|logMode, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log: %w", name, err)
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "# %s %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))

	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	// Pdeathsig fires when the thread that forked the child exits, not the
	// process: fork from a goroutine locked to its thread for the child's
	// whole life, and unlock it (rather than let it end, which would end
	// the thread) once the child is reaped. Without this, any goroutine
	// that ends while locked to the thread that happened to fork this
	// child kills it.
	p := &proc{name: name, dir: dir, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	if err := fsutil.WriteFileAtomic(pidFilePath(dir, name), []byte(strconv.Itoa(p.pid)+"\n"), 0o644); err != nil {
		_ = p.stop(ctx, 0) // nobody can stop it by pidfile; never leave it behind
		return nil, fmt.Errorf("start %s: pidfile: %w", name, err)
	}
	return p, nil
}

// exited reports whether the process is gone (or is no longer ours: its pid
// now belongs to another program).
func (p *proc) exited() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return true
		default:
			return false
		}
	}
	return !isOurs(p.pid, p.name, p.dir)
}

// exitDescription says how a process this process started ended.
func (p *proc) exitDescription() string {
	if p.done == nil {
		return "exited"
	}
	<-p.done
	if p.waitErr == nil {
		return "exited with status 0"
	}
	return p.waitErr.Error()
}

// waitGone waits up to timeout (and at most until ctx is done) for the
// process to exit, and reports whether it did.
func (p *proc) waitGone(ctx context.Context, timeout time.Duration) bool {
	if p.exited() {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-p.done: // nil channel blocks: pidfile processes are polled
			return true
		case <-tick.C:
			if p.exited() {
				return true
			}
		case <-ctx.Done():
			return p.exited()
		}
	}
}

// stop sends SIGTERM, waits up to grace (bounded by ctx), then SIGKILL, and
// waits for the process to be gone.
func (p *proc) stop(ctx context.Context, grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if grace > 0 {
		if err := syscall.Kill(p.pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stop %s (pid %d): SIGTERM: %w", p.name, p.pid, err)
		}
		if p.waitGone(ctx, grace) {
			return nil
		}
	}
	if p.exited() { // re-check right before killing: never signal a recycled pid
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s (pid %d): SIGKILL: %w", p.name, p.pid, err)
	}
	if p.waitGone(context.WithoutCancel(ctx), killWait) {
		return nil
	}
	return fmt.Errorf("stop %s (pid %d): still running %s after SIGKILL", p.name, p.pid, killWait)
}

// isOurs reports whether pid is a live (not zombie) process of the binary
// name whose command line refers to dir: a pidfile whose pid was recycled by
// another program is never signalled.
func isOurs(pid int, name, dir string) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// Format: "pid (comm) S ...": the state follows the last ')'.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(raw) == 0 {
		return false
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	if filepath.Base(args[0]) != name {
		return false
	}
	prefix := dir + string(filepath.Separator)
	for _, a := range args[1:] {
		if strings.Contains(a, prefix) {
			return true
		}
	}
	return false
}

// cmdlineFlag returns the value of --flag=value on pid's command line.
func cmdlineFlag(pid int, flag string) string {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	for _, a := range strings.Split(string(raw), "\x00") {
		if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
			return v
		}
	}
	return ""
}

// liveProc returns the process named by dir's pidfile for name, or nil if
// there is no pidfile or its process is gone.
func liveProc(dir, name string) (*proc, error) {
	raw, err := os.ReadFile(pidFilePath(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s pidfile: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("pidfile %s: bad pid %q", pidFilePath(dir, name), strings.TrimSpace(string(raw)))
	}
	if !isOurs(pid, name, dir) {
		return nil, nil
	}
	return &proc{name: name, pid: pid, dir: dir}, nil
}

// LiveProcesses lists the control-plane processes of dir that are running,
// according to dir's pidfiles (a pid recycled by another program does not
// count).
func LiveProcesses(dir string) ([]Process, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("state dir %q: %w", dir, err)
	}
	var out []Process
	var errs []error
	for _, name := range stopOrder() {
		p, err := liveProc(dir, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p != nil {
			out = append(out, Process{Name: name, PID: p.pid})
		}
	}
	return out, errors.Join(errs...)
}

// StopDir stops the control plane whose state is in dir, by its pidfiles:
// the scheduler and controller manager (if running), kube-apiserver, then
// etcd, each with SIGTERM and, after a grace period (cut short when ctx is
// done), SIGKILL. It removes the pidfiles. Stopping a
// stopped control plane (or a dir that never held one) is not an error.
func StopDir(ctx context.Context, dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("state dir %q: %w", dir, err)
	}
	var errs []error
	for _, name := range stopOrder() {
		p, err := liveProc(dir, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p != nil {
			if err := p.stop(ctx, stopGrace); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := os.Remove(pidFilePath(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s pidfile: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// LogTail returns the last lines of the log of process name in dir, for
// error messages. It never fails: a missing log yields a note saying so.
func LogTail(dir, name string) string {
	path := LogPath(dir, name)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > tailMaxRead {
		if _, err := f.Seek(fi.Size()-tailMaxRead, io.SeekStart); err != nil {
			return fmt.Sprintf("(cannot read log %s: %v)", path, err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read log %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return "--- last lines of " + path + " ---\n" + strings.Join(lines, "\n")
}
