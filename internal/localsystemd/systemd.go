package localsystemd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/nodekit/nodekit/internal/cgroot"
)

// Default paths of the binaries (Debian 12).
const (
	DefaultSystemd    = "/lib/systemd/systemd"
	DefaultDBusDaemon = "/usr/bin/dbus-daemon"
	DefaultLogind     = "/lib/systemd/systemd-logind"

	targetUnit    = "nodekit.target"
	logindService = "systemd-logind.service"
	// maxSocketPath is sun_path's size less its terminating NUL.
	maxSocketPath = 107
)

// Config configures Start.
type Config struct {
	// Dir holds the namespace's /run (run/), its unit directory (units/)
	// and systemd's console log (console.log). It must exist, be empty of
	// those names and be short enough for the socket paths below it.
	Dir string
	// Systemd is the binary; "" is DefaultSystemd.
	Systemd string
	// Units are extra unit files (name to content) put beside the minimal
	// set; they start only when something asks for them.
	Units map[string]string
	// Logind also starts systemd-logind (DefaultLogind) with the target;
	// Start then waits until org.freedesktop.login1 is on the bus.
	Logind bool
	// ReadyTimeout bounds the wait for "running"; 0 is 60s.
	ReadyTimeout time.Duration
}

// Systemd is a running private systemd.
type Systemd struct {
	// BusAddress is the D-Bus address of its system bus,
	// "unix:path=DIR/run/dbus/system_bus_socket".
	BusAddress string
	// PrivateAddress is systemd's own peer-to-peer socket,
	// "unix:path=DIR/run/systemd/private".
	PrivateAddress string
	// CgroupBase is systemd's root cgroup as the host names it, in
	// cgroupfs form ("/nodekit-systemd-1a2b3c4d"): its "/kubepods.slice"
	// is CgroupBase + "/kubepods.slice" below every hierarchy.
	CgroupBase string
	// RunDir is the namespace's /run on the host.
	RunDir string
	// ConsoleLog is the file systemd logs to.
	ConsoleLog string

	cmd    *exec.Cmd
	exited chan struct{}
	root   *cgroot.Root
}

// Available reports what this machine lacks to run Start: root,
// unshare(1), systemd or dbus-daemon.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("localsystemd: needs root (namespaces, cgroups)")
	}
	for _, b := range []string{DefaultSystemd, DefaultDBusDaemon} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("localsystemd: %w", err)
		}
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return fmt.Errorf("localsystemd: %w", err)
	}
	return nil
}

// Start starts systemd and waits until it reports running (or degraded)
// over its bus. On error nothing is left running.
func Start(ctx context.Context, cfg Config) (*Systemd, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if cfg.Systemd == "" {
		cfg.Systemd = DefaultSystemd
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("localsystemd: Config.Dir: %w", err)
	}
	s := &Systemd{
		RunDir:     filepath.Join(dir, "run"),
		ConsoleLog: filepath.Join(dir, "console.log"),
		exited:     make(chan struct{}),
	}
	busSocket := filepath.Join(s.RunDir, "dbus", "system_bus_socket")
	if len(busSocket) > maxSocketPath {
		return nil, fmt.Errorf("localsystemd: Config.Dir %q is too long for the socket %s (at most %d bytes)", dir, busSocket, maxSocketPath)
	}
	s.BusAddress = "unix:path=" + busSocket
	s.PrivateAddress = "unix:path=" + filepath.Join(s.RunDir, "systemd", "private")
	if cfg.Logind {
		if _, err := os.Stat(DefaultLogind); err != nil {
			return nil, fmt.Errorf("localsystemd: Config.Logind: %w", err)
		}
	}
	if err := writeLayout(dir, cfg.Units, cfg.Logind); err != nil {
		return nil, err
	}
	script, err := innerScript(dir, cfg.Systemd)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "inner.sh"), []byte(script), 0o644); err != nil {
		return nil, fmt.Errorf("localsystemd: %w", err)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("localsystemd: %w", err)
	}
	s.root, err = cgroot.Create("nodekit-systemd-" + hex.EncodeToString(b[:]))
	if err != nil {
		return nil, fmt.Errorf("localsystemd: %w", err)
	}
	s.CgroupBase = s.root.Name
	if err := s.spawn(dir); err != nil {
		_ = s.root.Remove()
		return nil, err
	}
	err = s.waitRunning(ctx, cfg.ReadyTimeout)
	if err == nil && cfg.Logind {
		err = s.waitName(ctx, cfg.ReadyTimeout, "org.freedesktop.login1")
	}
	if err != nil {
		stopErr := s.Stop(ctx)
		return nil, errors.Join(fmt.Errorf("%w (console log: %s)", err, s.tail()), stopErr)
	}
	return s, nil
}

// spawn starts the outer shell: it joins the cgroup in every hierarchy,
// then becomes unshare, whose forked child is the namespaces' PID 1.
func (s *Systemd) spawn(dir string) error {
	procs, err := cgroupProcFiles(s.root.Name)
	if err != nil {
		return err
	}
	outer := `for f in "$@"; do echo $$ > "$f" || exit 1; done
exec unshare --pid --fork --kill-child --mount --uts --ipc --net --cgroup --propagation private --mount-proc /bin/sh "$D/inner.sh"`
	cmd := exec.Command("/bin/sh", append([]string{"-c", outer, "sh"}, procs...)...)
	cmd.Env = []string{"D=" + dir, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := os.OpenFile(filepath.Join(dir, "starter.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("localsystemd: %w", err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Pdeathsig fires when the thread that forked the child exits, not the
	// process: fork from a goroutine locked to its thread until the child
	// is reaped, then unlock it (a goroutine ending locked ends its
	// thread, which would kill whatever else that thread forked).
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("localsystemd: start: %w", err)
	}
	s.cmd = cmd
	return nil
}

// cgroupProcFiles lists cgroup.procs of name in every hierarchy.
func cgroupProcFiles(name string) ([]string, error) {
	ms, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		if m.fstype != "tmpfs" && (m.dir == "/sys/fs/cgroup" || strings.HasPrefix(m.dir, "/sys/fs/cgroup/")) {
			out = append(out, filepath.Join(m.dir, name, "cgroup.procs"))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("localsystemd: no cgroup hierarchy under /sys/fs/cgroup")
	}
	return out, nil
}

// waitRunning polls Manager.SystemState until it is running or degraded.
func (s *Systemd) waitRunning(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		state, err := s.SystemState(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case state == "running" || state == "degraded":
			return nil
		case state == "maintenance" || state == "stopping" || state == "offline":
			return fmt.Errorf("localsystemd: systemd is %q", state)
		default:
			last = "state " + state
		}
		select {
		case <-s.exited:
			return fmt.Errorf("localsystemd: systemd exited before it was running (%s)", last)
		case <-ctx.Done():
			return fmt.Errorf("localsystemd: systemd not running within %v: %s: %w", timeout, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitName polls the bus until name has an owner.
func (s *Systemd) waitName(ctx context.Context, timeout time.Duration, name string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := s.Dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var has bool
		last := "no owner"
		err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, name).Store(&has)
		if err == nil && has {
			return nil
		} else if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localsystemd: %s not on the bus within %v (%s): %w", name, timeout, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// LogindConfDir is where systemd-logind (Config.Logind) reads drop-ins
// besides /etc: the namespace's /run/systemd/logind.conf.d, on the host.
func (s *Systemd) LogindConfDir() string {
	return filepath.Join(s.RunDir, "systemd", "logind.conf.d")
}

// Dial connects to the private system bus, authenticated and registered
// (Hello). The caller closes the connection.
func (s *Systemd) Dial(ctx context.Context) (*dbus.Conn, error) {
	conn, err := dbus.Dial(s.BusAddress, dbus.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("localsystemd: dial %s: %w", s.BusAddress, err)
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("localsystemd: auth on %s: %w", s.BusAddress, err)
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("localsystemd: hello on %s: %w", s.BusAddress, err)
	}
	return conn, nil
}

// SystemState is what `systemctl is-system-running` prints, read over the
// system bus: "starting", "running", "degraded", ...
func (s *Systemd) SystemState(ctx context.Context) (string, error) {
	conn, err := s.Dial(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	v, err := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		GetProperty("org.freedesktop.systemd1.Manager.SystemState")
	if err != nil {
		return "", fmt.Errorf("localsystemd: SystemState: %w", err)
	}
	state, ok := v.Value().(string)
	if !ok {
		return "", fmt.Errorf("localsystemd: SystemState is %T, not a string", v.Value())
	}
	return state, nil
}

// Command is exec.Command(name, args...) run in systemd's PID namespace
// (through nsenter(1)), everything else staying the host's. A client of
// its logind needs it for calls that record the caller (Inhibit): the bus
// reports the caller's PID as logind's namespace sees it, and from outside
// that is no PID at all, which logind refuses ("Protocol error").
func (s *Systemd) Command(name string, args ...string) (*exec.Cmd, error) {
	pid, err := s.PID()
	if err != nil {
		return nil, err
	}
	return exec.Command("nsenter", append([]string{"--target", strconv.Itoa(pid), "--pid", "--", name}, args...)...), nil
}

// Enter is the command prefix (nsenter(1)) that runs a program in
// systemd's PID, mount and cgroup namespaces, on the host's network:
// there /run is RunDir (the system bus at /run/dbus/system_bus_socket),
// /sys/fs/cgroup is rooted at CgroupBase and PIDs are systemd's, as a
// node agent or a container runtime on a host booted by this systemd
// sees them, while the host's loopback and bridges stay reachable.
func (s *Systemd) Enter() ([]string, error) {
	pid, err := s.PID()
	if err != nil {
		return nil, err
	}
	return []string{"nsenter", "--target", strconv.Itoa(pid), "--pid", "--mount", "--cgroup", "--"}, nil
}

// PID is systemd's process ID on the host: the only child of unshare.
func (s *Systemd) PID() (int, error) {
	if s.cmd == nil {
		return 0, errors.New("localsystemd: not running")
	}
	pid := s.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, fmt.Errorf("localsystemd: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0, fmt.Errorf("localsystemd: unshare (pid %d) has children %q, want one", pid, f)
	}
	return strconv.Atoi(f[0])
}

// Stop asks systemd to exit, kills the namespace if it has not within
// 20s (or when ctx ends), and removes its cgroup subtree. It is
// idempotent.
func (s *Systemd) Stop(ctx context.Context) error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.exited:
	default:
		if conn, err := s.Dial(ctx); err == nil {
			_ = conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
				CallWithContext(ctx, "org.freedesktop.systemd1.Manager.Exit", 0).Err
			conn.Close()
		}
		timer := time.NewTimer(20 * time.Second)
		defer timer.Stop()
		select {
		case <-s.exited:
		case <-timer.C:
		case <-ctx.Done():
		}
		// unshare --kill-child: killing the group takes PID 1, and so the
		// whole PID namespace, with it.
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
	if err := s.root.Remove(); err != nil {
		return fmt.Errorf("localsystemd: remove cgroup %s: %w", s.root.Name, err)
	}
	return nil
}

// tail is the end of the console log, for errors.
func (s *Systemd) tail() string {
	b, _ := os.ReadFile(s.ConsoleLog)
	if st, _ := os.ReadFile(filepath.Join(filepath.Dir(s.ConsoleLog), "starter.log")); len(st) > 0 {
		b = append(b, st...)
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
