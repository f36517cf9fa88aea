package localcri

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The containerd versions an instance can run (Config.Version).
const (
	// Containerd16 is Debian's containerd 1.6 with Debian's shim and runc.
	Containerd16 = "1.6"
	// Containerd2 is containerd 2 with its runc v2 shim and a newer runc,
	// all three from <BinDir>/containerd2 (built by
	// hack/build-containerd2.sh, part of `make tools`).
	Containerd2 = "2"
)

// VersionEnv is the environment variable that picks the containerd
// version when Config.Version is empty.
const VersionEnv = "NODEKIT_CONTAINERD"

// containerd2Dir is the directory under BinDir holding containerd 2's
// binaries.
const containerd2Dir = "containerd2"

// ResolveVersion applies Config.Version's default: v itself when set, else
// $NODEKIT_CONTAINERD, else Containerd16. Anything but "1.6" and "2" is an
// error naming where it came from.
func ResolveVersion(v string) (string, error) {
	from := "Config.Version"
	if v == "" {
		v, from = os.Getenv(VersionEnv), "$"+VersionEnv
	}
	switch v {
	case "":
		return Containerd16, nil
	case Containerd16, Containerd2:
		return v, nil
	}
	return "", fmt.Errorf("%s: %q is not a containerd version this package runs (%q or %q)", from, v, Containerd16, Containerd2)
}

// LookupBinaries reports whether everything an instance of cfg's version
// runs is there: for 1.6, containerd, its runc shim, ctr and runc from the
// machine's packages; for 2, containerd, containerd-shim-runc-v2 and runc
// in <BinDir>/containerd2 (BinDir defaulted as by Start) and the machine's
// ctr. Both need ip, iptables and the CNI plugins. The error names what is
// missing.
func LookupBinaries(cfg Config) error {
	v, err := ResolveVersion(cfg.Version)
	if err != nil {
		return err
	}
	_, err = lookupBinaries(v, resolveBinDir(cfg.BinDir))
	return err
}

func lookupBinaries(version, binDir string) (binaries, error) {
	if version != Containerd2 {
		return lookupHostBinaries(true)
	}
	b, err := lookupHostBinaries(false)
	var missing []string
	if err != nil {
		missing = append(missing, err.Error())
	}
	if binDir == "" {
		missing = append(missing, "no bin dir with "+containerd2Dir+"/ (set $NODEKIT_BIN_DIR or Config.BinDir)")
	}
	dir := filepath.Join(binDir, containerd2Dir)
	for _, x := range []struct {
		name string
		dst  *string
	}{
		{"containerd", &b.containerd},
		{"containerd-shim-runc-v2", &b.shim},
		{"runc", &b.runc},
	} {
		if binDir == "" {
			break
		}
		p := filepath.Join(dir, x.name)
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, p)
			continue
		}
		*x.dst = p
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("containerd %s: missing %s (bash hack/build-containerd2.sh, or make tools, builds it)",
			version, strings.Join(missing, "; "))
	}
	return b, nil
}

// disabledPlugins2 are disabled on containerd 2 besides disabledPlugins:
// NRI listens on /var/run/nri/nri.sock, outside the instance's Dir, where
// two instances would meet.
func disabledPlugins2() []string {
	return []string{"io.containerd.nri.v1.nri"}
}

// containerd2Config is config version 3, for containerd 2: the CRI
// settings of containerd16Config under the plugin IDs containerd 2 split
// the CRI plugin into (cri.v1.images, cri.v1.runtime, grpc.v1.cri), the
// sandbox image pinned. Version 3 is what every containerd 2.x reads;
// 2.4 migrates it to its version 4 in memory (and logs a warning saying
// so). As with 1.6, all state is under Dir except the shims' sockets
// (/run/containerd/s, removed by Stop).
func containerd2Config(q map[string]string) []byte {
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format+"\n", args...) }
	w("# Written by nodekit internal/localcri; regenerated on every start.")
	w("version = 3")
	writeConfigHead(w, q)
	w("  [plugins.\"io.containerd.cri.v1.images\"]")
	w("    snapshotter = \"overlayfs\"")
	w("    [plugins.\"io.containerd.cri.v1.images\".pinned_images]")
	w("      sandbox = %s", q["sandbox"])
	w("    [plugins.\"io.containerd.cri.v1.images\".registry]")
	w("      config_path = %s", q["registries"])
	w("  [plugins.\"io.containerd.cri.v1.runtime\"]")
	w("    restrict_oom_score_adj = true")
	w("    netns_mounts_under_state_dir = true")
	w("    disable_apparmor = true")
	// CDI devices (DRA drivers write their specs to CDIDir, or to one of
	// Config.CDIDirs). CDI is always
	// on in containerd 2.4 (its enable_cdi option is gone); containerd
	// 1.6 has none (enable_cdi came with 1.7), so CRI CDI_devices are not
	// applied there.
	w("    cdi_spec_dirs = [%s]", q["cdi"])
	w("    [plugins.\"io.containerd.cri.v1.runtime\".containerd]")
	w("      default_runtime_name = \"runc\"")
	w("      [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]")
	w("        runtime_type = \"io.containerd.runc.v2\"")
	w("        [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]")
	w("          SystemdCgroup = %s", q["systemdCgroup"])
	w("          BinaryName = %s", q["runc"])
	w("          Root = %s", q["runcRoot"])
	w("    [plugins.\"io.containerd.cri.v1.runtime\".cni]")
	w("      bin_dirs = [%s]", q["cniBin"])
	w("      conf_dir = %s", q["cniConf"])
	w("      max_conf_num = 1")
	w("      conf_template = \"\"")
	w("  [plugins.\"io.containerd.grpc.v1.cri\"]")
	w("    stream_server_address = \"127.0.0.1\"")
	w("    stream_server_port = \"0\"")
	w("    enable_tls_streaming = false")
	return []byte(sb.String())
}

// validateCDIDirs checks Config.CDIDirs: absolute paths, and containerd 2,
// the one that reads CDI specs.
func validateCDIDirs(version string, dirs []string) error {
	if len(dirs) > 0 && version != Containerd2 {
		return fmt.Errorf("CDI spec dirs %q (Config.CDIDirs): containerd %s has no CDI support (enable_cdi came with containerd 1.7)", dirs, version)
	}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("CDI spec dir %q (Config.CDIDirs) is not an absolute path", d)
		}
	}
	return nil
}
