package localcri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// readyTimeout bounds how long Start waits for the CRI to answer when ctx
// has no earlier deadline.
const readyTimeout = 2 * time.Minute

// Containerd is a running containerd of this package's own.
type Containerd struct {
	Dir      string // everything the instance owns is under Dir
	Endpoint string // CRI endpoint, "unix://" + Socket
	Socket   string // containerd's gRPC socket

	// The pod network: a bridge of the instance's own holding Gateway,
	// usable as the node IP.
	Bridge  string
	Gateway net.IP
	Subnet  *net.IPNet

	// Images are the images imported at start (agnhost is missing when its
	// binary was not found).
	Images []ImageTar
	// Built are all the images built for the instance: Images, and with
	// Config.Mirrors also those left for pods to pull (push them to the
	// mirror).
	Built []ImageTar

	// Version is the containerd this instance runs (Containerd16 or
	// Containerd2), and RuntimeVersion what its CRI Version call reports
	// (e.g. "1.6.20~ds1" or "v2.4.2").
	Version        string
	RuntimeVersion string

	st     instanceState
	done   <-chan struct{} // closed when our child exits; nil when not our child
	detach bool            // how containerd was started, for Restart

	mu      sync.Mutex
	stopped bool
	stopErr error
}

// instanceState is what StopDir needs to find and stop an instance; it is
// written to Dir/instance.json.
type instanceState struct {
	PID      int    `json:"pid"`
	Dir      string `json:"dir"`
	Config   string `json:"config"`
	Socket   string `json:"socket"`
	RuncRoot string `json:"runcRoot"`
	Runc     string `json:"runc"`
	Bridge   string `json:"bridge"`
	Subnet   string `json:"subnet"`
	Gateway  string `json:"gateway"`
	// Version and BinDir find the binaries again for Restart.
	Version string `json:"version,omitempty"`
	BinDir  string `json:"binDir,omitempty"`
	// Enter and Bus are Config.Systemd's: containerd runs under Enter (PID
	// is then containerd's, not Enter's), with Bus as its system bus.
	Enter []string `json:"enter,omitempty"`
	Bus   string   `json:"bus,omitempty"`
}

func (s instanceState) network() podNetwork {
	n := podNetwork{Bridge: s.Bridge, Gateway: net.ParseIP(s.Gateway).To4()}
	if _, subnet, err := net.ParseCIDR(s.Subnet); err == nil {
		n.Subnet = subnet
	}
	return n
}

// Start builds (or reuses) the test images, starts containerd with a config
// of its own under cfg.Dir, and returns once the CRI answers Version and
// Status over the socket and the images are imported. On error nothing of
// the instance is left running.
func Start(ctx context.Context, cfg Config) (*Containerd, error) {
	logger := klog.FromContext(ctx)
	p, err := prepareStart(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	cacheDir := imageCacheDir(cfg.ImageCache, p.binDir, p.dir)
	t0 := time.Now()
	images, err := buildImages(ctx, cacheDir, p.binDir, cfg.ConformanceImages)
	if err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	logger.V(1).Info("Images ready", "cache", cacheDir, "duration", time.Since(t0))

	netw, err := allocateNetwork(ctx, p.dir)
	if err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	c := newContainerd(p, netw, cfg)
	// Record the network before anything else so that StopDir can undo it.
	if err := writeState(p.l, c.st); err != nil {
		return c.abortStart(ctx, err)
	}
	if err := writeConfigs(p, cfg, netw); err != nil {
		return c.abortStart(ctx, err)
	}

	t0 = time.Now()
	if c.RuntimeVersion, err = c.launch(ctx, p.l, p.bins); err != nil {
		return c.abortStart(ctx, err)
	}
	// At the default verbosity: a test log says which runtime it ran on.
	logger.Info("containerd is ready", "containerd", p.version, "runtimeVersion", c.RuntimeVersion,
		"binary", p.bins.containerd, "pid", c.st.PID, "socket", p.l.socket, "duration", time.Since(t0))

	t0 = time.Now()
	imported := imagesToImport(images, cfg.Mirrors, cfg.PreloadImages)
	if err := importImages(ctx, p.bins, p.l, c, imported); err != nil {
		return c.abortStart(ctx, fmt.Errorf("%w (containerd log: %s)", err, logTail(p.l.logFile)))
	}
	c.Images, c.Built = imported, images
	logger.V(1).Info("Images imported", "count", len(imported), "built", len(images), "duration", time.Since(t0))
	return c, nil
}

// startPlan is what Start settled before building anything: the
// instance's directory and layout, the containerd version and binaries.
type startPlan struct {
	dir     string
	l       layout
	version string
	binDir  string
	bins    binaries
}

// prepareStart checks cfg, finds the binaries, creates the instance's
// directories and clears what a dead instance left in them.
func prepareStart(ctx context.Context, cfg Config) (startPlan, error) {
	if cfg.Dir == "" {
		return startPlan{}, errors.New("Config.Dir is empty")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return startPlan{}, fmt.Errorf("Config.Dir: %w", err)
	}
	p := startPlan{dir: dir, l: newLayout(dir)}
	if err := checkSocketPath(p.l.socket); err != nil {
		return startPlan{}, err
	}
	if p.version, err = ResolveVersion(cfg.Version); err != nil {
		return startPlan{}, err
	}
	if err := validateConfig(p.version, cfg); err != nil {
		return startPlan{}, err
	}
	p.l.cdiMore = cfg.CDIDirs
	p.binDir = resolveBinDir(cfg.BinDir)
	if p.bins, err = lookupBinaries(p.version, p.binDir); err != nil {
		return startPlan{}, err
	}
	if err := p.l.mkdirs(); err != nil {
		return startPlan{}, fmt.Errorf("create dirs: %w", err)
	}
	// A container in a user namespace runs as an unprivileged host ID that
	// must traverse Dir to its bundle (a 0700 os.MkdirTemp dir refuses it).
	if err := searchable(dir); err != nil {
		return startPlan{}, fmt.Errorf("Config.Dir: %w", err)
	}
	if err := cleanStale(ctx, p.l); err != nil {
		return startPlan{}, err
	}
	return p, nil
}

// validateConfig checks the registries, systemd and CDI fields of cfg
// for a containerd of the given version.
func validateConfig(version string, cfg Config) error {
	if err := validateLocalhost(cfg.LocalhostRegistries); err != nil {
		return err
	}
	if err := validateMirrors(cfg.Mirrors); err != nil {
		return err
	}
	if err := validateSystemd(cfg.Systemd); err != nil {
		return err
	}
	return validateCDIDirs(version, cfg.CDIDirs)
}

// imageCacheDir is where the images are built: Config.ImageCache, else
// "images" beside the bin dir, else under the instance's directory.
func imageCacheDir(configured, binDir, dir string) string {
	switch {
	case configured != "":
		return configured
	case binDir != "":
		return filepath.Join(filepath.Dir(filepath.Clean(binDir)), "images")
	default:
		return filepath.Join(dir, "images")
	}
}

// newContainerd is the instance Start is about to run on the pod network
// netw, not yet written down.
func newContainerd(p startPlan, netw podNetwork, cfg Config) *Containerd {
	c := &Containerd{
		Dir: p.dir, Socket: p.l.socket, Endpoint: "unix://" + p.l.socket,
		Bridge: netw.Bridge, Gateway: netw.Gateway, Subnet: netw.Subnet, Version: p.version,
		st: instanceState{Dir: p.dir, Config: p.l.config, Socket: p.l.socket, RuncRoot: p.l.runcRoot, Runc: p.bins.runc,
			Bridge: netw.Bridge, Subnet: netw.Subnet.String(), Gateway: netw.Gateway.String(),
			Version: p.version, BinDir: p.binDir},
		detach: cfg.Detach,
	}
	if cfg.Systemd != nil {
		c.st.Enter, c.st.Bus = cfg.Systemd.Enter, cfg.Systemd.Bus
	}
	return c
}

// abortStart stops what a failed Start began (containerd, its network)
// and returns err naming the instance.
func (c *Containerd) abortStart(ctx context.Context, err error) (*Containerd, error) {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if serr := c.Stop(stopCtx); serr != nil {
		klog.FromContext(ctx).Error(serr, "Cleaning up after a failed start")
	}
	return nil, fmt.Errorf("start containerd in %s: %w", c.Dir, err)
}

// writeConfigs writes the registry, CNI and containerd configuration
// files of the instance.
func writeConfigs(p startPlan, cfg Config, netw podNetwork) error {
	if err := writeRegistryConfig(p.l); err != nil {
		return fmt.Errorf("registry config: %w", err)
	}
	if err := writeMirrorConfig(p.l, cfg.Mirrors); err != nil {
		return fmt.Errorf("registry mirrors: %w", err)
	}
	if err := writeLocalhostConfig(p.l, cfg.LocalhostRegistries); err != nil {
		return fmt.Errorf("localhost registries: %w", err)
	}
	if err := writeCNIConfig(p.l, netw); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	conf, err := containerdConfig(p.version, p.l, p.bins, cfg.Systemd != nil)
	if err != nil {
		return fmt.Errorf("containerd config: %w", err)
	}
	if err := os.WriteFile(p.l.config, conf, 0o644); err != nil {
		return fmt.Errorf("write containerd config: %w", err)
	}
	return nil
}

// launch spawns containerd with the instance's config, records its pid
// (state file and pidfile) and waits until its CRI answers; it returns
// the runtime version the CRI reports. Start and Restart both use it.
func (c *Containerd) launch(ctx context.Context, l layout, bins binaries) (string, error) {
	pid, done, err := spawn(l, bins, c.st, c.detach)
	if err != nil {
		return "", err
	}
	c.st.PID, c.done = pid, done
	if err := writeState(l, c.st); err != nil {
		return "", err
	}
	if err := os.WriteFile(l.pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write pidfile: %w", err)
	}
	return waitReady(ctx, c, l)
}

// spawn starts containerd (under st.Enter, if set, returning the pid of
// the containerd it forks). Without detach it runs in its own process
// group and gets SIGTERM if the caller dies; with detach it runs in its
// own session and outlives the caller. The returned channel is closed
// once the process started (containerd or Enter) has exited and was
// reaped.
func spawn(l layout, bins binaries, st instanceState, detach bool) (int, <-chan struct{}, error) {
	logFile, err := os.OpenFile(l.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, nil, fmt.Errorf("open containerd log: %w", err)
	}
	argv := st.argv(bins.containerd, "--config", l.config, "--log-level", "info")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = l.dir
	cmd.Env = childEnv(bins)
	if st.Bus != "" {
		cmd.Env = append(cmd.Env, systemdBusEnv+"="+st.Bus)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	}

	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Pdeathsig fires when the thread that forked the child exits, so
		// keep this goroutine on its thread until the child is gone; then
		// unlock it: a goroutine that ends locked ends its thread, which
		// would kill whatever else that thread forked before (with
		// Pdeathsig), e.g. another test helper's processes.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		_ = logFile.Close()
		started <- err
		if err != nil {
			return
		}
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return 0, nil, fmt.Errorf("run %s: %w", bins.containerd, err)
	}
	if len(st.Enter) > 0 {
		pid, err := enteredChild(cmd.Process.Pid, l.config, done)
		if err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return 0, nil, fmt.Errorf("run %s under %v: %w; log: %s", bins.containerd, st.Enter, err, logTail(l.logFile))
		}
		return pid, done, nil
	}
	return cmd.Process.Pid, done, nil
}

func writeState(l layout, st instanceState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode instance state: %w", err)
	}
	if err := os.WriteFile(l.stateFile, data, 0o644); err != nil {
		return fmt.Errorf("write instance state: %w", err)
	}
	return nil
}

func readState(dir string) (instanceState, error) {
	data, err := os.ReadFile(newLayout(dir).stateFile)
	if err != nil {
		return instanceState{}, err
	}
	var st instanceState
	if err := json.Unmarshal(data, &st); err != nil {
		return instanceState{}, fmt.Errorf("decode %s: %w", newLayout(dir).stateFile, err)
	}
	return st, nil
}

// cleanStale refuses a Dir whose containerd still runs and cleans up after
// one that died without Stop.
func cleanStale(ctx context.Context, l layout) error {
	st, err := readState(l.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.PID != 0 && processMatches(st.PID, st.Config) {
		return fmt.Errorf("containerd (pid %d) is already running in %s", st.PID, l.dir)
	}
	klog.FromContext(ctx).Info("Cleaning up a stale instance", "dir", l.dir, "bridge", st.Bridge)
	c := &Containerd{Dir: l.dir, Socket: st.Socket, st: st}
	return c.Stop(ctx)
}

// searchable adds search (x) permission for group and others to dir.
func searchable(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if m := st.Mode().Perm(); m&0o011 != 0o011 {
		return os.Chmod(dir, m|0o011)
	}
	return nil
}
