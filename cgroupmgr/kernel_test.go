package cgroupmgr_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
