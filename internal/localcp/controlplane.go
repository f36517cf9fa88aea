package localcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodekit/nodekit/internal/fsutil"
)

const (
	// DefaultReadyTimeout bounds Start when Config.ReadyTimeout is zero.
	DefaultReadyTimeout = 90 * time.Second
	// ServiceClusterIPRange is the API server's --service-cluster-ip-range.
	ServiceClusterIPRange = "10.96.0.0/16"
	// ServiceAccountIssuer is the API server's --service-account-issuer.
	ServiceAccountIssuer = "https://kubernetes.default.svc"

	kubernetesServiceIP = "10.96.0.1" // first address of ServiceClusterIPRange
	// clientQPS and clientBurst match kubelet's defaults, so node clients
	// behave like a real kubelet's and tests are not throttled.
	clientQPS   = 50
	clientBurst = 100
	// startAttempts bounds retries when a picked port was taken before the
	// process could bind it.
	startAttempts = 3
)

// Config says where and how to start a control plane.
type Config struct {
	// Dir is the state dir, owned by the control plane: certificates (pki/),
	// etcd data (etcd/), kubeconfigs, logs (logs/) and pidfiles. Start
	// always begins with an empty cluster and fresh certificates: it wipes
	// Dir/etcd, Dir/pki and the kubeconfigs it writes. Required.
	Dir string
	// BinDir holds kube-apiserver (and optionally etcd); "" means FindBinDir().
	BinDir string
	// NodeNames get a client certificate (CN=system:node:NAME,
	// O=system:nodes) and a kubeconfig Dir/node-NAME.kubeconfig. More can be
	// made later with NodeKubeconfig.
	NodeNames []string
	// Detach starts the processes in their own session, so they outlive the
	// caller; stop them with Stop or StopDir. Otherwise they are killed
	// (SIGKILL) when the caller dies.
	Detach bool
	// Log, if set, receives one line per start-up step.
	Log io.Writer
	// ReadyTimeout bounds the start-up (etcd healthy and /readyz ok);
	// 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// APIServerArgs are appended to kube-apiserver's flags, e.g.
	// "--feature-gates=...". A repeated single-valued flag overrides the
	// default; list flags such as --enable-admission-plugins add to it.
	APIServerArgs []string

	// pickPorts replaces freePorts in tests (port clashes); nil in real use.
	pickPorts func(ctx context.Context, n int) ([]int, error)
}

// ControlPlane is a running etcd + kube-apiserver. Its fields are set by
// Start or Attach and must not be changed.
type ControlPlane struct {
	Dir             string       // absolute state dir
	URL             string       // https://127.0.0.1:PORT
	EtcdURL         string       // http://127.0.0.1:PORT
	AdminKubeconfig string       // Dir/admin.kubeconfig, user in group system:masters
	Admin           *rest.Config // admin client config; use rest.CopyConfig before changing it
	CAFile          string       // CA that signs every certificate (client and serving)
	CAKeyFile       string       // its key, e.g. for kube-controller-manager's CSR signing
	// ServiceAccountKeyFile is the RSA key (PKCS#1 PEM) that signs service
	// account tokens (kube-controller-manager's --service-account-private-key-file).
	ServiceAccountKeyFile string

	log       io.Writer
	pickPorts func(ctx context.Context, n int) ([]int, error)

	mu        sync.Mutex // guards ca use, node files and the processes
	ca        *ca
	apiserver *proc
	etcd      *proc
	// controllers are the optional kube-controller-manager and
	// kube-scheduler by name (StartControllerManager, StartScheduler).
	controllers map[string]*proc
	// detach says how processes were started (Start's Config.Detach; true
	// after Attach), for StartAPIServer.
	detach bool
	// apiserverCmd is the command line of the API server StopAPIServer
	// stopped, which StartAPIServer runs again.
	apiserverCmd []string
}

func newControlPlane(dir string, log io.Writer) *ControlPlane {
	return &ControlPlane{
		Dir:                   dir,
		AdminKubeconfig:       filepath.Join(dir, "admin.kubeconfig"),
		CAFile:                pkiPath(dir, "ca.crt"),
		CAKeyFile:             pkiPath(dir, "ca.key"),
		ServiceAccountKeyFile: pkiPath(dir, "sa.key"),
		log:                   log,
		pickPorts:             freePorts,
	}
}

func pkiPath(dir, name string) string { return filepath.Join(dir, "pki", name) }

func nodeKubeconfigPath(dir, node string) string {
	return filepath.Join(dir, "node-"+node+".kubeconfig")
}

func (c *ControlPlane) logf(format string, args ...any) {
	if c.log != nil {
		fmt.Fprintf(c.log, "localcp: "+format+"\n", args...)
	}
}

// Start starts etcd and kube-apiserver with state in cfg.Dir, on free
// loopback ports, and returns once the API server answers /readyz with "ok"
// and the API server's kubelet-client identity is bound to
// system:kubelet-api-admin. ctx and cfg.ReadyTimeout bound only the
// start-up; the processes run until Stop (or, unless detached, until the
// caller dies). On failure everything started is stopped again and the
// error carries the tail of the failing process's log.
func Start(ctx context.Context, cfg Config) (*ControlPlane, error) {
	if cfg.Dir == "" {
		return nil, errors.New("localcp: Config.Dir is empty")
	}
	for i, n := range cfg.NodeNames {
		if err := validateNodeName(n); err != nil {
			return nil, fmt.Errorf("localcp: Config.NodeNames[%d]: %w", i, err)
		}
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("localcp: Config.Dir %q: %w", cfg.Dir, err)
	}
	bins, err := FindBinaries(cfg.BinDir)
	if err != nil {
		return nil, fmt.Errorf("localcp: %w", err)
	}
	live, err := LiveProcesses(dir)
	if err != nil {
		return nil, fmt.Errorf("localcp: %w", err)
	}
	if len(live) > 0 {
		return nil, fmt.Errorf("localcp: a control plane is already running in %s (%v); use Attach, or StopDir first", dir, live)
	}
	if err := resetDir(dir); err != nil {
		return nil, fmt.Errorf("localcp: %w", err)
	}
	c := newControlPlane(dir, cfg.Log)
	c.detach = cfg.Detach
	if cfg.pickPorts != nil {
		c.pickPorts = cfg.pickPorts
	}
	if err := c.writePKI(time.Now()); err != nil {
		return nil, fmt.Errorf("localcp: certificates: %w", err)
	}

	timeout := cfg.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	startCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ok := false
	defer func() {
		if !ok {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopGrace+killWait)
			defer cancel()
			_ = c.Stop(stopCtx)
		}
	}()
	if err := c.startEtcd(startCtx, bins.Etcd, cfg.Detach); err != nil {
		return nil, fmt.Errorf("localcp: %w", err)
	}
	if err := c.startAPIServer(startCtx, bins.KubeAPIServer, cfg); err != nil {
		return nil, fmt.Errorf("localcp: %w", err)
	}
	if err := c.bindKubeletClient(startCtx); err != nil {
		return nil, fmt.Errorf("localcp: %w", err)
	}
	for _, n := range cfg.NodeNames {
		if _, err := c.NodeKubeconfig(n); err != nil {
			return nil, fmt.Errorf("localcp: %w", err)
		}
	}
	ok = true
	c.logf("control plane ready at %s (admin kubeconfig %s)", c.URL, c.AdminKubeconfig)
	return c, nil
}

// resetDir creates dir and removes what a previous control plane left in it.
func resetDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	stale := []string{filepath.Join(dir, "pki"), filepath.Join(dir, "etcd"), filepath.Join(dir, "admin.kubeconfig")}
	nodes, err := filepath.Glob(filepath.Join(dir, "node-*.kubeconfig"))
	if err != nil {
		return fmt.Errorf("list node kubeconfigs: %w", err)
	}
	for _, name := range stopOrder() {
		stale = append(stale, pidFilePath(dir, name))
	}
	for _, p := range append(stale, nodes...) {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("clean state dir: %w", err)
		}
	}
	return nil
}

// writePKI generates the CA, the API server's serving and kubelet-client
// certificates, the admin client certificate and the service-account key.
func (c *ControlPlane) writePKI(now time.Time) error {
	authority, err := newCA(now)
	if err != nil {
		return err
	}
	if err := authority.write(c.CAFile, c.CAKeyFile); err != nil {
		return err
	}
	c.ca = authority
	leaves := []struct {
		file string
		spec certSpec
	}{
		{"apiserver", apiserverServingSpec()},
		{"apiserver-kubelet-client", certSpec{commonName: KubeletClientUser, client: true}},
		{"admin", certSpec{commonName: AdminUser, orgs: []string{"system:masters"}, client: true}},
	}
	for _, l := range leaves {
		kp, err := authority.issue(now, l.spec)
		if err != nil {
			return err
		}
		if err := writePair(pkiPath(c.Dir, l.file+".crt"), pkiPath(c.Dir, l.file+".key"), kp); err != nil {
			return err
		}
	}
	priv, pub, err := newServiceAccountKey()
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(c.ServiceAccountKeyFile, priv, 0o600); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(pkiPath(c.Dir, "sa.pub"), pub, 0o644)
}

// Attach returns the control plane already running in dir (started with
// Detach, possibly by another process). It fails unless both processes are
// alive and /readyz answers ok. Stop on the result stops them.
func Attach(ctx context.Context, dir string) (*ControlPlane, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localcp: state dir %q: %w", dir, err)
	}
	c := newControlPlane(dir, nil)
	c.detach = true // only detached control planes can be attached to
	var notRunning []string
	for _, name := range stopOrder() {
		p, err := liveProc(dir, name)
		if err != nil {
			return nil, fmt.Errorf("localcp: attach %s: %w", dir, err)
		}
		switch {
		case p == nil && (name == ProcEtcd || name == ProcAPIServer):
			notRunning = append(notRunning, name)
		case p == nil: // the controllers are optional
		case name == ProcEtcd:
			c.etcd = p
		case name == ProcAPIServer:
			c.apiserver = p
		default:
			if c.controllers == nil {
				c.controllers = map[string]*proc{}
			}
			c.controllers[name] = p
		}
	}
	if len(notRunning) > 0 {
		return nil, fmt.Errorf("localcp: attach %s: not running: %v", dir, notRunning)
	}
	c.EtcdURL = cmdlineFlag(c.etcd.pid, "advertise-client-urls")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("localcp: attach %s: admin kubeconfig: %w", dir, err)
	}
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	c.Admin, c.URL = cfg, cfg.Host
	if c.ca, err = loadCA(c.CAFile, c.CAKeyFile); err != nil {
		return nil, fmt.Errorf("localcp: attach %s: %w", dir, err)
	}
	if err := c.Ready(ctx); err != nil {
		return nil, fmt.Errorf("localcp: attach %s: %w", dir, err)
	}
	return c, nil
}

// Stop stops kube-apiserver, then etcd: SIGTERM, then SIGKILL after a grace
// period or once ctx is done, and waits for both to exit. It removes the
// pidfiles and keeps the state dir. Stopping twice is not an error.
func (c *ControlPlane) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, name := range []string{ProcScheduler, ProcControllerManager} {
		p := c.controllers[name]
		if p == nil {
			continue
		}
		if err := p.stop(ctx, stopGrace); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(c.controllers, name)
		if err := os.Remove(pidFilePath(c.Dir, p.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s pidfile: %w", p.name, err))
		}
	}
	for _, pp := range []**proc{&c.apiserver, &c.etcd} {
		p := *pp
		if p == nil {
			continue
		}
		if err := p.stop(ctx, stopGrace); err != nil {
			errs = append(errs, err)
			continue
		}
		*pp = nil
		if err := os.Remove(pidFilePath(c.Dir, p.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s pidfile: %w", p.name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("localcp: stop: %w", err)
	}
	return nil
}

// NodeKubeconfig returns the path of the kubeconfig of node agent name
// (Dir/node-NAME.kubeconfig), creating its client certificate
// (CN=system:node:NAME, O=system:nodes, files pki/node-NAME.crt/.key) and
// the kubeconfig on first use.
func (c *ControlPlane) NodeKubeconfig(name string) (string, error) {
	if err := validateNodeName(name); err != nil {
		return "", fmt.Errorf("node kubeconfig: %w", err)
	}
	path := nodeKubeconfigPath(c.Dir, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	kp, err := c.ca.issue(time.Now(), nodeClientSpec(name))
	if err != nil {
		return "", fmt.Errorf("node %q certificate: %w", name, err)
	}
	if err := writePair(pkiPath(c.Dir, "node-"+name+".crt"), pkiPath(c.Dir, "node-"+name+".key"), kp); err != nil {
		return "", fmt.Errorf("node %q certificate: %w", name, err)
	}
	if err := writeKubeconfig(path, kubeconfig(c.URL, c.ca.certPEM, "system:node:"+name, kp)); err != nil {
		return "", fmt.Errorf("node %q: %w", name, err)
	}
	return path, nil
}

// NodeConfig returns a client config authenticating as node agent name
// (see NodeKubeconfig). Each call returns a new config.
func (c *ControlPlane) NodeConfig(name string) (*rest.Config, error) {
	path, err := c.NodeKubeconfig(name)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("node %q kubeconfig: %w", name, err)
	}
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	return cfg, nil
}

// writeKubeconfig writes a kubeconfig (0600) with the certificates embedded.
func writeKubeconfig(path string, kc *clientcmdapi.Config) error {
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return fmt.Errorf("encode kubeconfig %s: %w", path, err)
	}
	return fsutil.WriteFileAtomic(path, data, 0o600)
}

func validateNodeName(name string) error {
	if name == "" {
		return errors.New("node name is empty")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("node name %q is not a DNS subdomain: %v", name, errs)
	}
	return nil
}
