package csitest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/agenttest"
)

// DriverPackage is the import path of the driver command.
const DriverPackage = "github.com/nodekit/nodekit/agenttest/csitest/cmd/csitest-driver"

// DriverEnv names a driver binary built beforehand (from DriverPackage),
// which Build then returns instead of building one: for test binaries run
// where there is no go command (internal/localvm's guest).
const DriverEnv = "NODEKIT_CSITEST_DRIVER"

// Build builds the driver command into dir with `go build` and returns the
// binary's path, or returns $NODEKIT_CSITEST_DRIVER when set. Call it
// once per test binary (TestMain or a sync.Once) and pass the path to
// Start.
func Build(dir string) (string, error) {
	if bin := os.Getenv(DriverEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("$%s: %w", DriverEnv, err)
		}
		return bin, nil
	}
	return agenttest.BuildCommand(dir, DriverPackage, "csitest-driver")
}

// Options of a started driver; Name, NodeID and Topology as in Config.
type Options struct {
	Name       string
	NodeID     string
	MaxVolumes int64
	Topology   map[string]string
	// RegistryDir, when set, makes the driver register there.
	RegistryDir string
	// NoVolumeStats: the driver does not advertise GET_VOLUME_STATS.
	NoVolumeStats bool
	// VolumeMountGroup: the driver advertises VOLUME_MOUNT_GROUP (it
	// applies the pod's fsGroup itself: it chgrps the published target).
	VolumeMountGroup bool
	// ExpandVolume: the driver advertises EXPAND_VOLUME (Expansions lists
	// its NodeExpandVolume calls).
	ExpandVolume bool
	// BlockSize is the size of a new block volume's file (0: 16 MiB).
	BlockSize int64
	// StageTmpfs: a file system volume is staged on a tmpfs of its own
	// mounted with the capability's mount flags (Config.StageTmpfs).
	StageTmpfs bool
	// SingleNodeMultiWriter: the driver advertises
	// SINGLE_NODE_MULTI_WRITER (AccessModes shows the modes it got).
	SingleNodeMultiWriter bool
}

// Process is a running driver.
type Process struct {
	// Endpoint is the CSI socket; StateDir holds calls.log and fail.
	Endpoint, StateDir, Name string
	cmd                      *exec.Cmd
	done                     chan struct{}
}

// Start runs the driver binary bin (from Build) as its own process; it is
// stopped (SIGTERM, then waited for) when the test ends. It needs root
// (the driver mounts); under -short it skips as the other starters.
func Start(t testing.TB, bin string, o Options) *Process {
	t.Helper()
	agenttest.SkipShort(t, "CSI test driver")
	if os.Geteuid() != 0 {
		agenttest.RequireIntegration(t, "CSI test driver", fmt.Errorf("it mounts, and runs as uid %d, not root", os.Geteuid()))
	}
	if o.Name == "" {
		o.Name = "csi.nodekit.test"
	}
	if o.NodeID == "" {
		o.NodeID = "node-1"
	}
	dir, err := os.MkdirTemp("", "csitest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := &Process{Endpoint: filepath.Join(dir, "csi.sock"), StateDir: filepath.Join(dir, "state"), Name: o.Name, done: make(chan struct{})}
	args := []string{"-name", o.Name, "-node-id", o.NodeID, "-state-dir", p.StateDir, "-endpoint", p.Endpoint,
		"-max-volumes", fmt.Sprint(o.MaxVolumes), "-registry-dir", o.RegistryDir}
	if o.VolumeMountGroup {
		args = append(args, "-volume-mount-group")
	}
	if o.NoVolumeStats {
		args = append(args, "-no-volume-stats")
	}
	if o.ExpandVolume {
		args = append(args, "-expand-volume")
	}
	if o.StageTmpfs {
		args = append(args, "-stage-tmpfs")
	}
	if o.SingleNodeMultiWriter {
		args = append(args, "-single-node-multi-writer")
	}
	if o.BlockSize > 0 {
		args = append(args, "-block-size", fmt.Sprint(o.BlockSize))
	}
	if len(o.Topology) > 0 {
		var kv []string
		for k, v := range o.Topology {
			kv = append(kv, k+"="+v)
		}
		args = append(args, "-topology", strings.Join(kv, ","))
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.Stop)
	p.waitForSocket(t)
	return p
}

func (p *Process) waitForSocket(t testing.TB) {
	t.Helper()
	c := clock.RealClock{}
	deadline := c.Now().Add(30 * time.Second)
	for c.Now().Before(deadline) {
		// A dial, not a stat: the socket file exists from bind, a moment
		// before the listener accepts.
		if conn, err := net.DialTimeout("unix", p.Endpoint, time.Second); err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-p.done:
			t.Fatalf("CSI test driver exited before serving: %v", p.cmd.ProcessState)
		case <-c.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("CSI test driver did not serve %s within 30s", p.Endpoint)
}

// Stop ends the driver (SIGTERM) and waits for it; its sockets go away,
// as a driver's do when it is removed from the node.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
}

// Calls returns the call log: one "RPC VOLUME PATH" line per call.
func (p *Process) Calls() ([]string, error) {
	b, err := os.ReadFile(filepath.Join(p.StateDir, CallLogFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"), nil
}

// Secrets returns the lines of SecretsLogFile ("RPC VOLUME K=V,..."), in
// order; none when no call carried secrets.
func (p *Process) Secrets() ([]string, error) { return p.lines(SecretsLogFile) }

// MountFlags returns the lines of MountFlagsLogFile ("RPC VOLUME FLAG
// ..."), in order.
func (p *Process) MountFlags() ([]string, error) { return p.lines(MountFlagsLogFile) }

// Contexts returns the lines of ContextLogFile ("RPC VOLUME K=V,..."), in
// order.
func (p *Process) Contexts() ([]string, error) { return p.lines(ContextLogFile) }

// AccessModes returns the lines of AccessModeLogFile ("RPC VOLUME MODE"),
// in order.
func (p *Process) AccessModes() ([]string, error) { return p.lines(AccessModeLogFile) }

// Expansions returns the lines of ExpandLogFile ("VOLUME PATH BYTES"),
// one per NodeExpandVolume call, in order.
func (p *Process) Expansions() ([]string, error) { return p.lines(ExpandLogFile) }

func (p *Process) lines(name string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(p.StateDir, name))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"), nil
}

// TimedCall is a line of TimedCallLogFile: when the call came in, and
// its "RPC VOLUME PATH".
type TimedCall struct {
	At   time.Time
	Call string
}

// TimedCalls returns the calls with the time each came in, in order.
func (p *Process) TimedCalls() ([]TimedCall, error) {
	lines, err := p.lines(TimedCallLogFile)
	if err != nil {
		return nil, err
	}
	out := make([]TimedCall, 0, len(lines))
	for _, l := range lines {
		at, call, _ := strings.Cut(l, " ")
		ts, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", TimedCallLogFile, err)
		}
		out = append(out, TimedCall{At: ts, Call: call})
	}
	return out, nil
}

// Fail makes rpc fail with the gRPC code (e.g. "Internal") until
// Recover; Recover clears every injected failure.
func (p *Process) Fail(rpc, code string) error {
	return p.appendFail(rpc + " " + code)
}

// FailVolume is Fail for the calls of one volume (its handle, or an
// inline volume's ID) only.
func (p *Process) FailVolume(rpc, code, volume string) error {
	return p.appendFail(rpc + " " + code + " " + volume)
}

// FailVolumeTimes is FailVolume for the first n calls of rpc for volume
// only: the driver counts them itself, so a test need not race the
// agent's next retry to recover the volume.
func (p *Process) FailVolumeTimes(rpc, code, volume string, n int) error {
	return p.appendFail(fmt.Sprintf("%s %s %s %d", rpc, code, volume, n))
}

func (p *Process) appendFail(line string) error {
	f, err := os.OpenFile(filepath.Join(p.StateDir, FailFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// RecoverVolume clears the failures FailVolume injected into rpc for
// volume, keeping the others. The fail file is replaced by a rename, so
// the driver reads either the old or the new one.
func (p *Process) RecoverVolume(rpc, volume string) error {
	path := filepath.Join(p.StateDir, FailFile)
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var keep strings.Builder
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 2 && f[0] == rpc && f[2] == volume {
			continue
		}
		keep.WriteString(line)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(keep.String()), 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Recover clears the injected failures.
func (p *Process) Recover() error {
	err := os.Remove(filepath.Join(p.StateDir, FailFile))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}
