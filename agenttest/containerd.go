package agenttest

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/localcri"
)

// containerdStopTimeout bounds the teardown of a test's containerd.
const containerdStopTimeout = 2 * time.Minute

// Image references StartContainerd's containerd holds (besides aliases such
// as docker.io/library/busybox:latest and registry.k8s.io/pause:3.10.2).
const (
	BusyboxImage = localcri.BusyboxImage // registry.k8s.io/e2e-test-images/busybox:1.37.0-2, CMD ["sh"]
	PauseImage   = localcri.SandboxImage // registry.k8s.io/pause:3.10.1, the sandbox image
	AgnhostImage = localcri.AgnhostImage // registry.k8s.io/e2e-test-images/agnhost:2.66.1, when built
	NonRootImage = localcri.NonRootImage // registry.k8s.io/e2e-test-images/nonroot:1.5, busybox with USER 1234
	// GlibcDNSImage is busybox with the machine's glibc hostname(1), when
	// the machine has one: registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1.
	GlibcDNSImage = localcri.GlibcDNSImage
)

// The containerd versions StartContainerd runs. Which one a test gets is
// picked by $NODEKIT_CONTAINERD ("1.6", the default, or "2") unless the
// test asks for one with WithContainerdVersion.
const (
	ContainerdVersion16 = localcri.Containerd16 // Debian's containerd 1.6, its shim and runc
	ContainerdVersion2  = localcri.Containerd2  // containerd 2 and runc from $NODEKIT_BIN_DIR/containerd2 (make tools)
)

// ContainerdOption changes what StartContainerd starts.
type ContainerdOption func(*localcri.Config)

// WithContainerdVersion runs version (ContainerdVersion16 or
// ContainerdVersion2) whatever $NODEKIT_CONTAINERD says.
func WithContainerdVersion(version string) ContainerdOption {
	return func(c *localcri.Config) { c.Version = version }
}

// WithSystemd runs containerd in the namespaces of a private systemd
// with runc's systemd cgroup driver (localcri.Systemd): enter is the
// command prefix that enters them (localsystemd's Enter), bus that
// systemd's system bus address.
func WithSystemd(enter []string, bus string) ContainerdOption {
	return func(c *localcri.Config) { c.Systemd = &localcri.Systemd{Enter: enter, Bus: bus} }
}

// ContainerdVersion is the containerd version StartContainerd runs when the
// test does not choose: $NODEKIT_CONTAINERD, else ContainerdVersion16. An
// invalid value is an error naming the variable.
func ContainerdVersion() (string, error) { return localcri.ResolveVersion("") }

// Containerd is a private containerd (CRI v1) serving one test, with runc,
// a CNI bridge of its own and the local test images imported.
type Containerd struct {
	Endpoint string     // CRI endpoint, unix:///.../containerd.sock
	Socket   string     // the socket path of Endpoint
	Dir      string     // the instance's root, state, config and logs; removed after the test
	Bridge   string     // the pod network's bridge
	Gateway  net.IP     // the bridge's address: pods' gateway, usable as the node IP
	Subnet   *net.IPNet // the pods' /24
	Images   []string   // every image reference imported (tags and repo digests)
	// CDIDir is the directory of CDI spec files containerd 2 reads
	// (cdi_spec_dirs), where DRA drivers write theirs; containerd 1.6
	// reads none.
	CDIDir string
	// Version is the containerd it runs, ContainerdVersion16 or
	// ContainerdVersion2; RuntimeVersion is what CRI Version reports
	// (e.g. "1.6.20~ds1", "v2.4.2").
	Version        string
	RuntimeVersion string

	t testing.TB
	c *localcri.Containerd
}

// StartContainerd starts a private containerd for t and returns once its CRI
// answers and the test images are imported; t.Cleanup removes its pods,
// stops it, kills what it leaves and deletes its bridge. The version is
// $NODEKIT_CONTAINERD's (1.6 by default) unless an option says otherwise;
// the test log says which one ran ("containerd is ready" with the CRI
// runtime version). Without root, containerd or runc (for 2: the binaries
// `make tools` builds) the test is skipped (or fails, with
// $NODEKIT_REQUIRE_INTEGRATION set); if containerd fails to start the test
// fails with the tail of its log. The agnhost image is there only when
// _output/bin/agnhost (or $NODEKIT_BIN_DIR/agnhost) exists.
func StartContainerd(t testing.TB, opts ...ContainerdOption) *Containerd {
	t.Helper()
	itest.Short(t, "containerd")
	var cfg localcri.Config
	for _, o := range opts {
		o(&cfg)
	}
	if _, err := localcri.ResolveVersion(cfg.Version); err != nil {
		t.Fatalf("agenttest: %v", err)
	}
	if os.Geteuid() != 0 {
		RequireIntegration(t, "containerd", errors.New("containerd needs root"))
	}
	if err := localcri.LookupBinaries(cfg); err != nil {
		RequireIntegration(t, "containerd", err)
	}

	// Not t.TempDir(): a long test name would make the socket path too
	// long for a unix socket.
	dir, err := os.MkdirTemp("", "nkcri-")
	if err != nil {
		t.Fatalf("agenttest: containerd dir: %v", err)
	}
	t.Cleanup(func() { // registered first, so it runs after the stop below
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("agenttest: remove containerd dir: %v", err)
		}
	})
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1))))
	cfg.Dir = dir
	c, err := localcri.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("agenttest: start containerd: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agenttest: containerd of a failed test:%s", c.LogTail())
		}
		// t.Context() is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerdStopTimeout)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("agenttest: stop containerd: %v", err)
		}
	})
	var images []string
	for _, it := range c.Images {
		images = append(images, it.Tags...)
		images = append(images, it.RepoDigests...)
	}
	return &Containerd{
		Endpoint:       c.Endpoint,
		Socket:         c.Socket,
		Dir:            c.Dir,
		Bridge:         c.Bridge,
		Gateway:        c.Gateway,
		Subnet:         c.Subnet,
		Images:         images,
		CDIDir:         c.CDIDir(),
		Version:        c.Version,
		RuntimeVersion: c.RuntimeVersion,
		t:              t,
		c:              c,
	}
}

// HasImage reports whether ref (a tag or repo digest) was imported.
func (c *Containerd) HasImage(ref string) bool {
	for _, r := range c.Images {
		if r == ref {
			return true
		}
	}
	return false
}

// LogTail returns the last lines of containerd's log, for failure messages.
func (c *Containerd) LogTail() string { return c.c.LogTail() }

// Restart stops containerd without touching its shims and containers and
// starts it again on the same config, dirs and socket, as a containerd
// upgrade does; it returns once the CRI answers again. The test fails on
// error.
func (c *Containerd) Restart() {
	c.t.Helper()
	if err := c.c.Restart(c.t.Context()); err != nil {
		c.t.Fatalf("agenttest: %v", err)
	}
}

// RemoveAllPods stops and removes every pod sandbox and container through
// the CRI, leaving the node as a host reboot would; containerd keeps
// running. The test fails on error.
func (c *Containerd) RemoveAllPods() {
	c.t.Helper()
	if err := c.c.RemovePods(c.t.Context()); err != nil {
		c.t.Fatalf("agenttest: %v", err)
	}
}

// PID is the pid of the containerd process (it changes with Restart).
func (c *Containerd) PID() int { return c.c.PID() }
