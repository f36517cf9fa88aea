package agenttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/localcp"
)

// controlPlaneStopTimeout bounds the teardown of a test's control plane.
const controlPlaneStopTimeout = time.Minute

// ControlPlane is a private etcd + kube-apiserver v1.37.2 serving one test,
// on loopback ports, with the Node authorizer, RBAC and NodeRestriction on:
// node clients from NodeConfig are treated exactly like real kubelets.
// Only the API server runs unless the test asks for kube-controller-manager
// (WithControllerManager) or kube-scheduler (WithScheduler).
type ControlPlane struct {
	URL             string       // https://127.0.0.1:PORT
	Dir             string       // state dir (certificates, logs/, kubeconfigs), removed after the test
	AdminKubeconfig string       // kubeconfig of a system:masters user
	CAFile          string       // CA of the API server's serving and client certificates
	CAKeyFile       string       // its key, to sign CSRs in tests (without WithControllerManager)
	Admin           *rest.Config // admin client config (system:masters); copy before changing it

	t  testing.TB
	cp *localcp.ControlPlane
}

// ControlPlaneOption adjusts StartControlPlane.
type ControlPlaneOption func(*controlPlaneOptions)

type controlPlaneOptions struct {
	binDir            string
	nodes             []string
	apiserverArgs     []string
	controllerManager bool
	controllerArgs    []string
	scheduler         bool
	schedulerArgs     []string
}

// WithControllerManager also runs kube-controller-manager v1.37.2 (every
// controller but node IPAM: the PV binder, the ephemeral-volume and
// resource-claim controllers, garbage collection, CSR signing with the
// control plane's CA, service-account tokens). extra is appended to its
// flags. The test is skipped (or fails under
// $NODEKIT_REQUIRE_INTEGRATION) when the binary is not built.
func WithControllerManager(extra ...string) ControlPlaneOption {
	return func(o *controlPlaneOptions) {
		o.controllerManager = true
		o.controllerArgs = append(o.controllerArgs, extra...)
	}
}

// WithScheduler also runs kube-scheduler v1.37.2 (default profile, which
// binds pods and allocates DRA claims). extra is appended to its flags.
// Skipped like WithControllerManager when the binary is not built.
func WithScheduler(extra ...string) ControlPlaneOption {
	return func(o *controlPlaneOptions) {
		o.scheduler = true
		o.schedulerArgs = append(o.schedulerArgs, extra...)
	}
}

// WithBinDir runs kube-apiserver (and etcd, if there) from dir instead of
// $NODEKIT_BIN_DIR or the checkout's _output/bin.
func WithBinDir(dir string) ControlPlaneOption {
	return func(o *controlPlaneOptions) { o.binDir = dir }
}

// WithNodes creates node credentials up front (NodeConfig creates them on
// demand too).
func WithNodes(names ...string) ControlPlaneOption {
	return func(o *controlPlaneOptions) { o.nodes = append(o.nodes, names...) }
}

// WithAPIServerArgs appends flags to kube-apiserver's command line, e.g.
// "--feature-gates=X=true". A repeated single-valued flag overrides the
// default; list flags such as --enable-admission-plugins add to it.
func WithAPIServerArgs(args ...string) ControlPlaneOption {
	return func(o *controlPlaneOptions) { o.apiserverArgs = append(o.apiserverArgs, args...) }
}

// StartControlPlane starts a private etcd + kube-apiserver for t and returns
// once /readyz answers ok; t.Cleanup stops it (SIGTERM, then SIGKILL) and
// removes its state. If the binaries are not installed the test is skipped
// (or fails, with $NODEKIT_REQUIRE_INTEGRATION set); if they fail to start
// the test fails with the tail of the failing process's log. When the test
// fails, the tail of the API server log is logged at cleanup.
func StartControlPlane(t testing.TB, opts ...ControlPlaneOption) *ControlPlane {
	t.Helper()
	var o controlPlaneOptions
	for _, opt := range opts {
		opt(&o)
	}
	itest.Short(t, "local control plane (etcd + kube-apiserver)")
	_, err := localcp.FindBinaries(o.binDir)
	if missing := (*localcp.MissingBinaryError)(nil); errors.As(err, &missing) {
		RequireIntegration(t, "local control plane (etcd + kube-apiserver)", err)
	} else if err != nil {
		t.Fatalf("agenttest: control plane binaries: %v", err)
	}

	kcm, sched := controllerBinaries(t, o)
	dir := t.TempDir() // registered before the stop below, so removed after it
	cp, err := localcp.Start(t.Context(), localcp.Config{
		Dir:           dir,
		BinDir:        o.binDir,
		NodeNames:     o.nodes,
		Log:           t.Output(),
		APIServerArgs: o.apiserverArgs,
	})
	if err != nil {
		t.Fatalf("agenttest: start control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agenttest: control plane of a failed test\n%s", localcp.LogTail(cp.Dir, localcp.ProcAPIServer))
		}
		// t.Context() is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), controlPlaneStopTimeout)
		defer cancel()
		if err := cp.Stop(ctx); err != nil {
			t.Errorf("agenttest: stop control plane: %v", err)
		}
	})
	startControllers(t, cp, kcm, sched, o)
	return &ControlPlane{
		URL:             cp.URL,
		Dir:             cp.Dir,
		AdminKubeconfig: cp.AdminKubeconfig,
		CAFile:          cp.CAFile,
		CAKeyFile:       cp.CAKeyFile,
		Admin:           rest.CopyConfig(cp.Admin),
		t:               t,
		cp:              cp,
	}
}

// AdminClient returns a clientset authenticated as the admin (system:masters).
func (c *ControlPlane) AdminClient() kubernetes.Interface {
	c.t.Helper()
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(c.Admin))
	if err != nil {
		c.t.Fatalf("agenttest: admin client: %v", err)
	}
	return cs
}

// NodeConfig returns a client config authenticating as the node agent of
// node name (CN=system:node:NAME, O=system:nodes), creating its certificate
// on first use; the test fails on error. Each call returns a new config.
func (c *ControlPlane) NodeConfig(name string) *rest.Config {
	c.t.Helper()
	cfg, err := c.cp.NodeConfig(name)
	if err != nil {
		c.t.Fatalf("agenttest: %v", err)
	}
	return cfg
}

// NodeKubeconfig returns the path of node name's kubeconfig (see
// NodeConfig), for agents that take a --kubeconfig file.
func (c *ControlPlane) NodeKubeconfig(name string) string {
	c.t.Helper()
	path, err := c.cp.NodeKubeconfig(name)
	if err != nil {
		c.t.Fatalf("agenttest: %v", err)
	}
	return path
}

// LogTail returns the last lines of the log of process "kube-apiserver" or
// "etcd", for failure messages.
func (c *ControlPlane) LogTail(process string) string {
	return localcp.LogTail(c.Dir, process)
}

// StopAPIServer stops kube-apiserver and keeps etcd running, with the
// certificates, kubeconfigs and port, for tests of API-server outages; the
// test fails on error. Clients see connection errors until StartAPIServer.
func (c *ControlPlane) StopAPIServer() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.t.Context()), controlPlaneStopTimeout)
	defer cancel()
	if err := c.cp.StopAPIServer(ctx); err != nil {
		c.t.Fatalf("agenttest: %v", err)
	}
}

// StartAPIServer starts the API server StopAPIServer stopped again, on the
// same URL against the same etcd, and returns once /readyz answers ok; the
// test fails on error.
func (c *ControlPlane) StartAPIServer() {
	c.t.Helper()
	if err := c.cp.StartAPIServer(c.t.Context()); err != nil {
		c.t.Fatalf("agenttest: %v", err)
	}
}

// DeleteFromStorage deletes an object straight from etcd, behind the API
// server's back: for a change made "meanwhile" while the API server is
// stopped (etcd keeps running), which a restarted API server then serves.
// resource is the storage path segment ("pods", "configmaps", ...). It
// reports whether the object was there; the test fails on error.
func (c *ControlPlane) DeleteFromStorage(resource, namespace, name string) bool {
	c.t.Helper()
	key := "/registry/" + resource + "/" + namespace + "/" + name
	n, err := c.cp.EtcdDelete(c.t.Context(), key)
	if err != nil {
		c.t.Fatalf("agenttest: %v", err)
	}
	return n > 0
}

// controllerBinaries finds the controllers o asks for, skipping the test
// (or failing it under $NODEKIT_REQUIRE_INTEGRATION) when one is missing.
func controllerBinaries(t testing.TB, o controlPlaneOptions) (kcm, sched string) {
	t.Helper()
	if !o.controllerManager && !o.scheduler {
		return "", ""
	}
	kcm, sched, err := localcp.ControllerBinaries(o.binDir)
	missing := (*localcp.MissingBinaryError)(nil)
	switch {
	case err == nil:
	case errors.As(err, &missing) && (o.controllerManager && kcm == "" || o.scheduler && sched == ""):
		RequireIntegration(t, "kube-controller-manager / kube-scheduler (hack/build-tools.sh)", err)
	case errors.As(err, &missing): // the one not asked for is missing
	default:
		t.Fatalf("agenttest: controller binaries: %v", err)
	}
	return kcm, sched
}

// startControllers starts the controllers o asks for; cp.Stop (registered
// as a cleanup already) stops them first.
func startControllers(t testing.TB, cp *localcp.ControlPlane, kcm, sched string, o controlPlaneOptions) {
	t.Helper()
	if o.controllerManager {
		if err := cp.StartControllerManager(t.Context(), kcm, o.controllerArgs...); err != nil {
			t.Fatalf("agenttest: start kube-controller-manager: %v", err)
		}
	}
	if o.scheduler {
		if err := cp.StartScheduler(t.Context(), sched, o.schedulerArgs...); err != nil {
			t.Fatalf("agenttest: start kube-scheduler: %v", err)
		}
	}
}
