package cgroupmgr

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
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
	defaults := KernelDefaults()
	names := make([]string, 0, len(defaults))
	for n := range defaults {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		want := defaults[n]
		b, err := os.ReadFile(filepath.Join(procSys, n))
		if err != nil {
			errs = append(errs, fmt.Errorf("read kernel flag %s: %w", n, err))
			continue
		}
		got, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			errs = append(errs, fmt.Errorf("kernel flag %s: %q is not a number", n, strings.TrimSpace(string(b))))
			continue
		}
		if got != want {
			errs = append(errs, fmt.Errorf("invalid kernel flag: %v, expected value: %v, actual value: %v", n, want, got))
		}
	}
	return utilerrors.NewAggregate(errs)
}
