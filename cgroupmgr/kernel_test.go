package cgroupmgr_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodekit/nodekit/cgroupmgr"
)

func writeSysctls(t *testing.T, values map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, v := range values {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheckKernelDefaults(t *testing.T) {
	good := map[string]string{}
	for n, v := range cgroupmgr.KernelDefaults() {
		good[n] = strconv.Itoa(v)
	}
	if err := cgroupmgr.CheckKernelDefaults(writeSysctls(t, good)); err != nil {
		t.Fatalf("expected values: %v", err)
	}

	bad := map[string]string{}
	for n, v := range good {
		bad[n] = v
	}
	bad["vm/overcommit_memory"] = "0"
	bad["kernel/panic"] = "1"
	delete(bad, "kernel/keys/root_maxbytes")
	err := cgroupmgr.CheckKernelDefaults(writeSysctls(t, bad))
	if err == nil {
		t.Fatal("no error for differing sysctls")
	}
	for _, want := range []string{
		"invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0",
		"invalid kernel flag: kernel/panic, expected value: 10, actual value: 1",
		"read kernel flag kernel/keys/root_maxbytes",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "panic_on_oom") {
		t.Errorf("error %q names a sysctl that is as expected", err)
	}
}

func readSysctls(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for n := range cgroupmgr.KernelDefaults() {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = strings.TrimSpace(string(b))
	}
	return out
}

// TestSetKernelDefaults: with protectKernelDefaults false, every tunable
// that differs from upstream's value is set to it, the others are left
// alone, and a tunable that cannot be read or written fails the start
// naming it (unless writes may fail, in a user namespace).
func TestSetKernelDefaults(t *testing.T) {
	want := map[string]string{}
	for n, v := range cgroupmgr.KernelDefaults() {
		want[n] = strconv.Itoa(v)
	}
	values := map[string]string{}
	for n, v := range want {
		values[n] = v
	}
	values["vm/overcommit_memory"] = "0"
	values["kernel/panic"] = "0"
	values["kernel/keys/root_maxkeys"] = "200"
	dir := writeSysctls(t, values)
	// A tunable already at its value is not rewritten: its mtime stays.
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(filepath.Join(dir, "vm/panic_on_oom"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := cgroupmgr.SetKernelDefaults(t.Context(), dir, false); err != nil {
		t.Fatalf("SetKernelDefaults: %v", err)
	}
	if got := readSysctls(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("after SetKernelDefaults: %v, want %v", got, want)
	}
	if err := cgroupmgr.CheckKernelDefaults(dir); err != nil {
		t.Fatalf("the check fails after the set: %v", err)
	}

	// Unreadable: an error naming it, whatever skipUnwritable says.
	missing := writeSysctls(t, map[string]string{"vm/overcommit_memory": "0"})
	for _, skip := range []bool{false, true} {
		err := cgroupmgr.SetKernelDefaults(t.Context(), missing, skip)
		if err == nil || !strings.Contains(err.Error(), "read kernel flag kernel/panic") {
			t.Fatalf("skipUnwritable %v, missing tunables: %v, want one naming kernel/panic", skip, err)
		}
	}

	if fi, err := os.Stat(filepath.Join(dir, "vm/panic_on_oom")); err != nil || !fi.ModTime().Equal(old) {
		t.Fatalf("vm/panic_on_oom was at its value, yet rewritten (%v)", err)
	}

	// Unwritable, even by root: kernel/panic is a read-only sysctl
	// (kernel/cap_last_cap, a number other than 10). The write fails,
	// naming it; with skipUnwritable it is skipped.
	ro := writeSysctls(t, want)
	p := filepath.Join(ro, "kernel/panic")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/sys/kernel/cap_last_cap", p); err != nil {
		t.Fatal(err)
	}
	err := cgroupmgr.SetKernelDefaults(t.Context(), ro, false)
	if err == nil || !strings.Contains(err.Error(), "set kernel flag kernel/panic to 10") {
		t.Fatalf("unwritable kernel/panic: %v, want an error naming it", err)
	}
	if err := cgroupmgr.SetKernelDefaults(t.Context(), ro, true); err != nil {
		t.Fatalf("unwritable, skipUnwritable: %v", err)
	}
}

func TestInUserNamespace(t *testing.T) {
	for _, tc := range []struct {
		name, uidMap string
		want         bool
	}{
		{"host", "         0          0 4294967295\n", false},
		{"container", "         0     100000      65536\n", true},
		{"not mapped yet", "", true},
		{"unparsable", "x\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSysctls(t, map[string]string{})
			if err := os.WriteFile(filepath.Join(dir, "uid_map"), []byte(tc.uidMap), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := cgroupmgr.InUserNamespace(dir); got != tc.want {
				t.Fatalf("InUserNamespace(%q) = %v, want %v", tc.uidMap, got, tc.want)
			}
		})
	}
	if cgroupmgr.InUserNamespace(t.TempDir()) {
		t.Fatal("no uid_map: in a user namespace")
	}
}
