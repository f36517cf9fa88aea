package dratest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/agenttest"
)

// DriverPackage is the import path of the driver command.
const DriverPackage = "github.com/nodekit/nodekit/agenttest/dratest/cmd/dratest-driver"

// Build builds the driver command into dir with `go build` and returns the
// binary's path. Call it once per test binary and pass the path to Start.
func Build(dir string) (string, error) {
	return agenttest.BuildCommand(dir, DriverPackage, "dratest-driver")
}

// Options of a started driver.
type Options struct {
	Name     string // driver name; default dra.nodekit.test
	NodeName string // required: the node whose slice it publishes
	Devices  int    // devices in the slice; default 1
	// CDIDir is the runtime's CDI spec directory (agenttest.Containerd.CDIDir).
	CDIDir string
	// RegistryDir is the agent's plugins_registry directory.
	RegistryDir string
	// Kubeconfig is the driver's API access; it publishes ResourceSlices
	// and reads ResourceClaims (a node's kubeconfig is enough).
	Kubeconfig string
}

// Process is a running driver.
type Process struct {
	Name string
	// StateDir holds calls.log; PluginDir the driver's dra.sock.
	StateDir, PluginDir string
	cdiDir, registryDir string
	cmd                 *exec.Cmd
	done                chan struct{}
}

// Start runs the driver binary bin (from Build) as its own process and
// returns once its registration socket is there; it is stopped (SIGTERM,
// then waited for) when the test ends. Under -short it skips as the other
// starters.
func Start(t testing.TB, bin string, o Options) *Process {
	t.Helper()
	agenttest.SkipShort(t, "DRA test driver")
	if o.Name == "" {
		o.Name = "dra.nodekit.test"
	}
	if o.Devices == 0 {
		o.Devices = 1
	}
	if o.NodeName == "" || o.CDIDir == "" || o.RegistryDir == "" || o.Kubeconfig == "" {
		t.Fatalf("dratest: Options need NodeName, CDIDir, RegistryDir and Kubeconfig: %+v", o)
	}
	dir, err := os.MkdirTemp("", "dratest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := &Process{Name: o.Name, StateDir: filepath.Join(dir, "state"), PluginDir: filepath.Join(dir, "plugin"),
		cdiDir: o.CDIDir, registryDir: o.RegistryDir, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "-name", o.Name, "-node-name", o.NodeName, "-devices", fmt.Sprint(o.Devices),
		"-cdi-dir", o.CDIDir, "-state-dir", p.StateDir, "-kubeconfig", o.Kubeconfig,
		"-registry-dir", o.RegistryDir, "-plugin-dir", p.PluginDir, "-v=3")
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	if err := os.MkdirAll(o.RegistryDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.Stop)
	p.waitForSocket(t, p.RegistrationSocket())
	return p
}

// RegistrationSocket is the driver's socket in the registry dir.
func (p *Process) RegistrationSocket() string {
	return filepath.Join(p.registryDir, p.Name+"-reg.sock")
}

// CDISpec is the path of the CDI spec file of the claim uid (there while
// the claim is prepared).
func (p *Process) CDISpec(uid string) string {
	return filepath.Join(p.cdiDir, p.Name+"-"+uid+".json")
}

func (p *Process) waitForSocket(t testing.TB, path string) {
	t.Helper()
	c := clock.RealClock{}
	deadline := c.Now().Add(60 * time.Second)
	for c.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("DRA test driver exited before serving: %v", p.cmd.ProcessState)
		case <-c.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("DRA test driver did not create %s within 60s", path)
}

// Stop ends the driver (SIGTERM) and waits for it; it removes its sockets.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
}

// SetHealth sets the health the driver reports for its devices (by name,
// "dev-0"; those not named are Healthy), within 100 ms.
func (p *Process) SetHealth(devices map[string]DeviceHealth) error {
	return WriteHealth(p.StateDir, devices)
}

// Calls returns the call log so far.
func (p *Process) Calls() ([]Call, error) { return ReadCalls(p.StateDir) }
