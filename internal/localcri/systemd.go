package localcri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Systemd runs an instance under a systemd of the caller's own (such as
// internal/localsystemd's) with runc's systemd cgroup driver: the runc
// runtime's options say SystemdCgroup = true, so containerd asks for a
// "<slice>:cri-containerd:<id>" cgroup and runc puts each container in a
// cri-containerd-<id>.scope of that slice, started over that systemd's
// bus. containerd, its shims, runc and the containers then live in
// systemd's PID, mount and cgroup namespaces (runc hands systemd a PID,
// which must be one of systemd's), on the host's network (the pod
// bridge, the CRI socket and the stream server stay reachable).
type Systemd struct {
	// Enter is the command prefix that runs a program in systemd's PID,
	// mount and cgroup namespaces, e.g. "nsenter --target PID --pid
	// --mount --cgroup --". containerd runs under it, and so do Stop's
	// runc and umount calls. Required.
	Enter []string
	// Bus is that systemd's system bus address, given to containerd (and
	// so to its shims and runc) as $DBUS_SYSTEM_BUS_ADDRESS; "" leaves the
	// namespace's /run/dbus/system_bus_socket.
	Bus string
}

// systemdBusEnv is where runc's systemd driver (go-systemd) looks for the
// system bus.
const systemdBusEnv = "DBUS_SYSTEM_BUS_ADDRESS"

// validateSystemd checks Config.Systemd.
func validateSystemd(s *Systemd) error {
	if s == nil {
		return nil
	}
	if len(s.Enter) == 0 || s.Enter[0] == "" {
		return errors.New("Config.Systemd.Enter is empty")
	}
	if _, err := exec.LookPath(s.Enter[0]); err != nil {
		return fmt.Errorf("Config.Systemd.Enter: %w", err)
	}
	return nil
}

// argv is the command line of name and args, behind the instance's
// Enter prefix when it runs under a systemd of its own.
func (s instanceState) argv(name string, args ...string) []string {
	return append(append(append([]string{}, s.Enter...), name), args...)
}

// command is exec.CommandContext of argv.
func (s instanceState) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	a := s.argv(name, args...)
	return exec.CommandContext(ctx, a[0], a[1:]...)
}

// enteredChild waits for the process the Enter command (pid) forks into
// the namespaces, the containerd whose command line names config, and
// returns its pid. nsenter with --pid must fork: the program it runs is
// its child, and that is what gets signals and what StopDir finds.
func enteredChild(pid int, config string, done <-chan struct{}) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		for p := range descendants(pid) {
			if processMatches(p, config) && !strings.HasSuffix(cmdlineHead(p), "nsenter") {
				return p, nil
			}
		}
		select {
		case <-done:
			return 0, fmt.Errorf("the Enter command (pid %d) exited before containerd started", pid)
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no containerd under the Enter command (pid %d) within 10s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// descendants yields the children of pid, their children and so on.
func descendants(pid int) func(func(int) bool) {
	return func(yield func(int) bool) {
		queue := []int{pid}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p, p))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				c, err := strconv.Atoi(f)
				if err != nil {
					continue
				}
				if !yield(c) {
					return
				}
				queue = append(queue, c)
			}
		}
	}
}

func cmdlineHead(pid int) string {
	if a := cmdline(pid); len(a) > 0 {
		return a[0]
	}
	return ""
}

// unmountScript lazily unmounts every mount point below $1 as the mount
// namespace it runs in sees them, deepest first.
const unmountScript = `awk -v d="$1/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" || exit 1; done`

// unmountEntered unmounts what the instance's containerd mounted below
// dir in the namespaces it runs in (rootfs overlays, network namespaces),
// which the host's mount table does not show.
func unmountEntered(ctx context.Context, st instanceState, dir string) error {
	if out, err := st.command(ctx, "/bin/sh", "-c", unmountScript, "sh", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("unmount below %s in containerd's namespaces: %w: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}
