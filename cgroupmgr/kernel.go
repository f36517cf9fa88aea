package cgroupmgr

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
)

// KernelDefaults returns the kernel tunables upstream kubelet expects,
// keyed by their path under /proc/sys: no memory overcommit heuristics,
// the OOM killer rather than a panic on OOM, reboot 10 s after a panic, a
// panic on an oops, and room for a key per container in root's keyring.
func KernelDefaults() map[string]int {
	return map[string]int{
		"vm/overcommit_memory":      1,
		"vm/panic_on_oom":           0,
		"kernel/panic":              10,
		"kernel/panic_on_oops":      1,
		"kernel/keys/root_maxkeys":  1000000,
		"kernel/keys/root_maxbytes": 25000000,
	}
}

// CheckKernelDefaults reads each of KernelDefaults under procSys (normally
// /proc/sys) and fails naming every one that is unreadable or differs, in
// upstream's words ("invalid kernel flag: vm/overcommit_memory, expected
// value: 1, actual value: 0"). It is what upstream does at start with
// protectKernelDefaults: true; it changes nothing.
func CheckKernelDefaults(procSys string) error {
	var errs []error
	for _, n := range kernelTunables() {
		want := KernelDefaults()[n]
		got, err := readTunable(procSys, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if got != want {
			errs = append(errs, fmt.Errorf("invalid kernel flag: %v, expected value: %v, actual value: %v", n, want, got))
		}
	}
	return utilerrors.NewAggregate(errs)
}

// SetKernelDefaults is what upstream does at start with
// protectKernelDefaults: false (its default): it reads each of
// KernelDefaults under procSys (normally /proc/sys) and writes the expected
// value over every one that differs, logging each change at V(2)
// ("Updating kernel flag" with the flag, the expected and the actual
// value). A tunable that cannot be read, or cannot be written, is an error
// naming it, and the agent should not start, as kubelet does not; with
// skipUnwritable (upstream: running in a user namespace with the
// KubeletInUserNamespace gate, on by default) a failed write is logged and
// skipped instead. It blocks on file I/O only.
func SetKernelDefaults(ctx context.Context, procSys string, skipUnwritable bool) error {
	logger := klog.FromContext(ctx)
	var errs []error
	for _, n := range kernelTunables() {
		want := KernelDefaults()[n]
		got, err := readTunable(procSys, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if got == want {
			continue
		}
		logger.V(2).Info("Updating kernel flag", "flag", n, "expectedValue", want, "actualValue", got)
		if err := os.WriteFile(filepath.Join(procSys, n), []byte(strconv.Itoa(want)), 0o640); err != nil {
			if skipUnwritable {
				logger.V(2).Info("Updating kernel flag failed (running in a user namespace, ignoring)", "flag", n, "err", err)
				continue
			}
			errs = append(errs, fmt.Errorf("set kernel flag %s to %d: %w", n, want, err))
		}
	}
	return utilerrors.NewAggregate(errs)
}

// kernelTunables are the names of KernelDefaults, sorted.
func kernelTunables() []string {
	defaults := KernelDefaults()
	names := make([]string, 0, len(defaults))
	for n := range defaults {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func readTunable(procSys, name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(procSys, name))
	if err != nil {
		return 0, fmt.Errorf("read kernel flag %s: %w", name, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("kernel flag %s: %q is not a number", name, strings.TrimSpace(string(b)))
	}
	return v, nil
}

// InUserNamespace reports whether the process runs in a user namespace
// other than the host's: its uid_map (procSelf is normally /proc/self) is
// empty (a namespace not mapped yet) or its first line is not the whole ID
// space mapped onto itself ("0 0 4294967295"). A uid_map that cannot be
// read or parsed means the host's (a kernel without user namespaces).
func InUserNamespace(procSelf string) bool {
	b, err := os.ReadFile(filepath.Join(procSelf, "uid_map"))
	if err != nil {
		return false
	}
	if len(b) == 0 {
		return true
	}
	var inside, outside, length int64
	if _, err := fmt.Sscanf(string(b), "%d %d %d", &inside, &outside, &length); err != nil {
		return false
	}
	return inside != 0 || outside != 0 || length != 4294967295
}
