package localsystemd

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// The minimal unit set: the start target pulls in the system bus and
// nothing else. DefaultDependencies=no keeps sysinit.target and
// basic.target (absent here) out of it.
var baseUnits = map[string]string{
	targetUnit: `[Unit]
Description=nodekit private systemd
Wants=dbus.socket dbus.service
`,
	"dbus.socket": `[Unit]
Description=D-Bus System Message Bus Socket
DefaultDependencies=no

[Socket]
ListenStream=/run/dbus/system_bus_socket
`,
	"dbus.service": `[Unit]
Description=D-Bus System Message Bus
DefaultDependencies=no
Requires=dbus.socket
After=dbus.socket

[Service]
Type=notify
NotifyAccess=main
ExecStart=` + DefaultDBusDaemon + ` --system --address=systemd: --nofork --nopidfile --systemd-activation --syslog-only
`,
	"system.slice": `[Unit]
Description=System Slice
DefaultDependencies=no
`,
}

// logindUnit runs systemd-logind (Config.Logind) without the
// distribution unit's sandboxing, which needs namespaces and mounts a
// nested container does not grant; its configuration drop-ins are read
// from /run/systemd/logind.conf.d too (LogindConfDir), so a test writes
// them below Config.Dir and never in the host's /etc. It logs to
// /run/logind.log (no journald runs).
const logindUnit = `[Unit]
Description=User Login Management
DefaultDependencies=no
Wants=dbus.socket
After=dbus.socket dbus.service

[Service]
BusName=org.freedesktop.login1
ExecStart=` + DefaultLogind + `
RuntimeDirectory=systemd/sessions systemd/seats systemd/users systemd/inhibit systemd/shutdown
RuntimeDirectoryPreserve=yes
Restart=always
RestartSec=0
Environment=SYSTEMD_LOG_TARGET=console
StandardOutput=append:/run/logind.log
StandardError=inherit
`

// poweroffTarget lets logind accept PowerOff (it refuses when the unit is
// missing) while doing nothing: unlike the distribution's, it pulls in no
// systemd-poweroff.service and has no SuccessAction, so starting it powers
// nothing off, not even the private systemd.
const poweroffTarget = `[Unit]
Description=Power-Off (nodekit private systemd: an empty target)
DefaultDependencies=no
`

// writeLayout makes run/, units/ (the unit files), empty/ and console.log
// in dir; with logind, the start target pulls in systemd-logind.service.
func writeLayout(dir string, extra map[string]string, logind bool) error {
	for _, d := range []string{"run", "units", "empty"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("localsystemd: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "console.log"), nil, 0o644); err != nil {
		return fmt.Errorf("localsystemd: %w", err)
	}
	units := map[string]string{}
	for k, v := range baseUnits {
		units[k] = v
	}
	if logind {
		units[logindService] = logindUnit
		units["poweroff.target"] = poweroffTarget
		units[targetUnit] += "Wants=" + logindService + "\n"
	}
	for k, v := range extra {
		if k == "" || strings.Contains(k, "/") {
			return fmt.Errorf("localsystemd: Config.Units: bad unit name %q", k)
		}
		units[k] = v
	}
	for name, text := range units {
		if err := os.WriteFile(filepath.Join(dir, "units", name), []byte(text), 0o644); err != nil {
			return fmt.Errorf("localsystemd: %w", err)
		}
	}
	return nil
}

// cgroupMount is one cgroup file system mounted on the host.
type cgroupMount struct {
	dir, fstype, opts string
}

// cgroupMounts lists the host's cgroup and cgroup2 mounts, and a tmpfs
// at /sys/fs/cgroup (the v1 and hybrid layouts), in mount order.
func cgroupMounts() ([]cgroupMount, error) {
	all, err := fsutil.Mounts()
	if err != nil {
		return nil, fmt.Errorf("localsystemd: %w", err)
	}
	var out []cgroupMount
	for _, m := range all {
		switch {
		case m.FSType == "cgroup" || m.FSType == "cgroup2":
			out = append(out, cgroupMount{dir: m.Point, fstype: m.FSType, opts: superOptions(m.FSType, m.SuperOptions)})
		case m.FSType == "tmpfs" && m.Point == "/sys/fs/cgroup":
			out = append(out, cgroupMount{dir: m.Point, fstype: "tmpfs", opts: "mode=755"})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].dir) < len(out[j].dir) })
	return out, nil
}

// superOptions keeps the options that choose what a cgroup mount holds
// (its controllers, name=, nsdelegate); a named hierarchy without
// controllers needs "none".
func superOptions(fstype, opts string) string {
	var keep []string
	named, ctrls := false, 0
	for _, o := range strings.Split(opts, ",") {
		switch {
		case o == "rw" || o == "ro" || o == "" || strings.HasPrefix(o, "release_agent="):
		case strings.HasPrefix(o, "name="):
			named = true
			keep = append(keep, o)
		case o == "xattr" || o == "nsdelegate" || o == "memory_recursiveprot" || o == "noprefix" || o == "clone_children" || o == "cpuset_v2_mode":
			keep = append(keep, o)
		default:
			ctrls++
			keep = append(keep, o)
		}
	}
	if fstype == "cgroup" && named && ctrls == 0 {
		keep = append([]string{"none"}, keep...)
	}
	return strings.Join(keep, ",")
}

// innerScript is PID 1's shell before it becomes systemd: it mounts the
// cgroup file systems afresh (their roots are now the cgroup
// namespace's), binds dir's run/, units/ and console.log in place, hides
// the distribution's units and generators, and execs systemd.
func innerScript(dir, systemd string) (string, error) {
	ms, err := cgroupMounts()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("set -e")
	for _, m := range ms {
		if m.dir != "/sys/fs/cgroup" && !strings.HasPrefix(m.dir, "/sys/fs/cgroup/") {
			continue
		}
		w("mkdir -p %s", shq(m.dir))
		if m.opts == "" {
			w("mount -t %s %s %s", m.fstype, m.fstype, shq(m.dir))
		} else {
			w("mount -t %s -o %s %s %s", m.fstype, shq(m.opts), m.fstype, shq(m.dir))
		}
	}
	w("mount --bind %s /run", shq(filepath.Join(dir, "run")))
	w("mount --bind %s /etc/systemd/system", shq(filepath.Join(dir, "units")))
	for _, d := range []string{"/lib/systemd/system", "/lib/systemd/system-generators", "/usr/local/lib/systemd/system", "/etc/systemd/system-generators", "/usr/local/lib/systemd/system-generators"} {
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			continue
		}
		w("mount --bind %s %s", shq(filepath.Join(dir, "empty")), shq(real))
	}
	w("mount --bind %s /dev/console", shq(filepath.Join(dir, "console.log")))
	w("exec env -i container=nodekit %s --system --unit=%s --log-target=console --show-status=no", shq(systemd), targetUnit)
	return b.String(), nil
}

// shq quotes s for sh.
func shq(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
