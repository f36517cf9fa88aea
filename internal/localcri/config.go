package localcri

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// modulePath is the module whose _output/bin holds the agnhost binary by
// default.
const modulePath = "github.com/nodekit/nodekit"

// maxSocketPath is the longest path a unix socket address can have
// (sizeof(sockaddr_un.sun_path) - 1).
const maxSocketPath = 107

// Config says where a Containerd keeps everything it owns.
type Config struct {
	// Dir holds the instance's root, state, socket, config, CNI config,
	// logs and pidfile. It is created if missing. Required.
	Dir string
	// BinDir is where the agnhost binary is. "" means $NODEKIT_BIN_DIR, or
	// else <the nodekit module's root>/_output/bin found by walking up from
	// the working directory.
	BinDir string
	// ImageCache is where built image tarballs are cached. "" means
	// <BinDir>/../images (or <Dir>/images without a BinDir).
	ImageCache string
	// Detach starts containerd in its own session so that it survives the
	// caller; stop it with StopDir.
	Detach bool
	// Version is the containerd to run: Containerd16 (Debian's, with its
	// shim and runc) or Containerd2 (with its shim and runc from
	// BinDir/containerd2, on the PATH of that containerd process only).
	// "" means $NODEKIT_CONTAINERD, or else Containerd16.
	Version string
	// Mirrors, when not empty, point registry names at local registries
	// (see Mirror), and Start then imports only the pause image: the
	// others are Containerd.Built, for the caller to push to the mirror,
	// and pods pull them for real. Registry names no mirror lists still
	// resolve to a closed loopback port. Off by default.
	Mirrors []Mirror
	// PreloadImages, with Mirrors, imports every built image all the
	// same: pods whose policy is IfNotPresent find theirs, and pulls
	// (policy Always) still go to the mirror.
	PreloadImages bool
	// LocalhostRegistries are "localhost:PORT" names that containerd
	// pulls from over plain HTTP on the node's loopback, where a
	// hostNetwork pod serves them (upstream's private-registry specs pull
	// FakeRegistryImage from agnhost's fake-registry-server). Other
	// localhost names resolve to the closed port like every name no
	// mirror lists.
	LocalhostRegistries []string
	// ConformanceImages also builds and imports the images only the
	// upstream conformance specs use (NonewprivsImage, NginxImage; see
	// BuildConformanceImages). The nonewprivs and hostpathplugin programs
	// are compiled with the go command on the PATH.
	ConformanceImages bool
	// CDIDirs are more directories containerd 2 reads CDI spec files from,
	// after its own (Containerd.CDIDir): upstream's DRA e2e driver writes
	// its specs to the node's /var/run/cdi, one of containerd's default
	// cdi_spec_dirs. Absolute paths, created if missing. containerd 1.6
	// has no CDI support (enable_cdi came with 1.7): Start refuses
	// CDIDirs for it.
	CDIDirs []string
	// Systemd, when set, runs containerd in the namespaces of a systemd
	// of the caller's own with runc's systemd cgroup driver (see
	// Systemd). Nil: the cgroupfs driver, on the host.
	Systemd *Systemd
}

// layout is every path of one instance.
type layout struct {
	dir, root, state, socket, ttrpc, config, logs, logFile    string
	cniConfDir, cniIPAMDir, runcRoot, opt, pidFile, stateFile string
	registries                                                string   // hosts.toml per registry
	cdi                                                       string   // CDI spec files (containerd 2)
	cdiMore                                                   []string // Config.CDIDirs
}

func newLayout(dir string) layout {
	return layout{
		dir:        dir,
		root:       filepath.Join(dir, "root"),
		state:      filepath.Join(dir, "state"),
		socket:     filepath.Join(dir, "containerd.sock"),
		ttrpc:      filepath.Join(dir, "containerd.sock.ttrpc"),
		config:     filepath.Join(dir, "config.toml"),
		logs:       filepath.Join(dir, "logs"),
		logFile:    filepath.Join(dir, "logs", "containerd.log"),
		cniConfDir: filepath.Join(dir, "cni", "net.d"),
		cniIPAMDir: filepath.Join(dir, "cni", "ipam"),
		runcRoot:   filepath.Join(dir, "runc"),
		opt:        filepath.Join(dir, "opt"),
		pidFile:    filepath.Join(dir, "containerd.pid"),
		stateFile:  filepath.Join(dir, "instance.json"),
		registries: filepath.Join(dir, "certs.d"),
		cdi:        filepath.Join(dir, "cdi"),
	}
}

func (l layout) mkdirs() error {
	for _, d := range []string{l.root, l.state, l.logs, l.cniConfDir, l.cniIPAMDir, l.runcRoot, l.opt, l.cdi} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
	}
	for _, d := range l.cdiMore {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

// binaries are the host programs an instance runs.
type binaries struct {
	containerd, ctr, runc, shim, ip, iptables string
}

// lookupHostBinaries finds the machine's programs an instance runs: ip,
// iptables, ctr and the CNI plugins, and with withRuntime also
// containerd, its runc shim and runc (Debian's containerd 1.6).
func lookupHostBinaries(withRuntime bool) (binaries, error) {
	var b binaries
	var missing []string
	progs := []struct {
		name string
		dst  *string
	}{
		{"ctr", &b.ctr},
		{"ip", &b.ip},
		{"iptables", &b.iptables},
	}
	if withRuntime {
		progs = append(progs, []struct {
			name string
			dst  *string
		}{
			{"containerd", &b.containerd},
			{"runc", &b.runc},
			{"containerd-shim-runc-v2", &b.shim},
		}...)
	}
	for _, x := range progs {
		p, err := lookPath(x.name)
		if err != nil {
			missing = append(missing, x.name)
			continue
		}
		*x.dst = p
	}
	for _, plugin := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, plugin))
		}
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("not installed: %s (apt-get install containerd runc containernetworking-plugins iptables iproute2)",
			strings.Join(missing, ", "))
	}
	return b, nil
}

// lookPath finds a program on $PATH or in the usual system directories
// (root's tools live in sbin, which a test's $PATH may lack).
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	for _, d := range systemBinDirs() {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

func systemBinDirs() []string {
	return []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
}

// childEnv is the environment containerd runs with: the caller's, with the
// directories of the binaries it execs (shim, runc, CNI plugins use PATH
// too) in front.
func childEnv(b binaries) []string {
	dirs := []string{filepath.Dir(b.shim), filepath.Dir(b.runc), filepath.Dir(b.containerd)}
	dirs = append(dirs, systemBinDirs()...)
	seen := map[string]bool{}
	var parts []string
	for _, d := range append(dirs, filepath.SplitList(os.Getenv("PATH"))...) {
		if d != "" && !seen[d] {
			seen[d] = true
			parts = append(parts, d)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "CONTAINERD_") {
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+strings.Join(parts, string(os.PathListSeparator)))
}

// resolveBinDir applies Config.BinDir's defaults; "" if none is found.
func resolveBinDir(binDir string) string {
	if binDir != "" {
		return binDir
	}
	if d := os.Getenv("NODEKIT_BIN_DIR"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isModuleRoot(filepath.Join(d, "go.mod")) {
			return filepath.Join(d, "_output", "bin")
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

func isModuleRoot(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == modulePath
		}
	}
	return false
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) (string, error) {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("path %q has a control character", s)
		}
	}
	// JSON string escaping of printable text is valid TOML.
	b, err := json.Marshal(s)
	return string(b), err
}

// disabledPlugins are plugins that cannot work here or that would reach
// outside the instance's directory; containerd logs an error for each
// snapshotter it cannot load otherwise.
func disabledPlugins() []string {
	return []string{
		"io.containerd.snapshotter.v1.aufs",
		"io.containerd.snapshotter.v1.btrfs",
		"io.containerd.snapshotter.v1.devmapper",
		"io.containerd.snapshotter.v1.zfs",
		"io.containerd.tracing.processor.v1.otlp",
		"io.containerd.internal.v1.tracing",
	}
}

// containerdConfig renders the instance's config.toml for its version.
func containerdConfig(version string, l layout, b binaries, systemdCgroup bool) ([]byte, error) {
	q, err := configValues(version, l, b)
	if err != nil {
		return nil, err
	}
	q["systemdCgroup"] = strconv.FormatBool(systemdCgroup)
	if version == Containerd2 {
		return containerd2Config(q), nil
	}
	return containerd16Config(q), nil
}

// configValues are the paths and names a config.toml holds, quoted as
// TOML strings; "disabled" is the TOML list of disabled plugins.
func configValues(version string, l layout, b binaries) (map[string]string, error) {
	q := map[string]string{}
	for k, v := range map[string]string{
		"root": l.root, "state": l.state, "socket": l.socket, "ttrpc": l.ttrpc,
		"cniConf": l.cniConfDir, "runcRoot": l.runcRoot, "opt": l.opt, "runc": b.runc,
		"sandbox": SandboxImage, "cniBin": cniBinDir, "registries": l.registries,
	} {
		s, err := tomlString(v)
		if err != nil {
			return nil, err
		}
		q[k] = s
	}
	var cdi []string
	for _, d := range append([]string{l.cdi}, l.cdiMore...) {
		s, err := tomlString(d)
		if err != nil {
			return nil, err
		}
		cdi = append(cdi, s)
	}
	q["cdi"] = strings.Join(cdi, ", ")
	var plugins []string
	disabled := disabledPlugins()
	if version == Containerd2 {
		disabled = append(disabled, disabledPlugins2()...)
	}
	for _, p := range disabled {
		s, _ := tomlString(p)
		plugins = append(plugins, s)
	}
	q["disabled"] = "[" + strings.Join(plugins, ", ") + "]"
	return q, nil
}

// containerd16Config is config version 2, for containerd 1.6.
func containerd16Config(q map[string]string) []byte {
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format+"\n", args...) }
	w("# Written by nodekit internal/localcri; regenerated on every start.")
	w("version = 2")
	writeConfigHead(w, q)
	w("  [plugins.\"io.containerd.grpc.v1.cri\"]")
	w("    sandbox_image = %s", q["sandbox"])
	w("    restrict_oom_score_adj = true")
	w("    stream_server_address = \"127.0.0.1\"")
	w("    stream_server_port = \"0\"")
	w("    enable_tls_streaming = false")
	w("    netns_mounts_under_state_dir = true")
	w("    disable_apparmor = true")
	w("    [plugins.\"io.containerd.grpc.v1.cri\".containerd]")
	w("      snapshotter = \"overlayfs\"")
	w("      default_runtime_name = \"runc\"")
	w("      [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]")
	w("        runtime_type = \"io.containerd.runc.v2\"")
	w("        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]")
	w("          SystemdCgroup = %s", q["systemdCgroup"])
	w("          BinaryName = %s", q["runc"])
	w("          Root = %s", q["runcRoot"])
	w("    [plugins.\"io.containerd.grpc.v1.cri\".registry]")
	w("      config_path = %s", q["registries"])
	w("    [plugins.\"io.containerd.grpc.v1.cri\".cni]")
	w("      bin_dir = %s", q["cniBin"])
	w("      conf_dir = %s", q["cniConf"])
	w("      max_conf_num = 1")
	w("      conf_template = \"\"")
	return []byte(sb.String())
}

// blackholeRegistry is where every image pull goes: a loopback port
// nothing listens on, so a pull of an image that was not imported fails
// at once and nothing leaves the machine.
const blackholeRegistry = "http://127.0.0.1:9"

// blackholedRegistries are the registries node tests name. "_default"
// covers the rest where the containerd version honours it.
var blackholedRegistries = []string{"_default", "registry.k8s.io", "docker.io", "gcr.io", "k8s.gcr.io", "quay.io", "ghcr.io", "mcr.microsoft.com", "invalid.registry.k8s.io"}

// writeRegistryConfig points every registry at blackholeRegistry.
func writeRegistryConfig(l layout) error {
	host := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", blackholeRegistry, blackholeRegistry)
	for _, r := range blackholedRegistries {
		d := filepath.Join(l.registries, r)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(host), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func checkSocketPath(socket string) error {
	if len(socket)+len(".ttrpc") > maxSocketPath {
		return fmt.Errorf("socket path %s is too long for a unix socket (%d > %d bytes): use a shorter Dir",
			socket, len(socket)+len(".ttrpc"), maxSocketPath)
	}
	return nil
}

// writeConfigHead writes what both config versions share after their
// version line: the instance's own root, state, sockets and opt directory,
// and no debug or metrics listener.
func writeConfigHead(w func(format string, args ...any), q map[string]string) {
	w("root = %s", q["root"])
	w("state = %s", q["state"])
	w("disabled_plugins = %s", q["disabled"])
	w("")
	w("[grpc]")
	w("  address = %s", q["socket"])
	w("  uid = 0")
	w("  gid = 0")
	w("  tcp_address = \"\"")
	w("")
	w("[ttrpc]")
	w("  address = %s", q["ttrpc"])
	w("")
	w("[debug]")
	w("  address = \"\"")
	w("  level = \"info\"")
	w("")
	w("[metrics]")
	w("  address = \"\"")
	w("")
	w("[plugins]")
	w("  [plugins.\"io.containerd.internal.v1.opt\"]")
	w("    path = %s", q["opt"])
}
