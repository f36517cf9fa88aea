package localvm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/internal/itest"
)

// requireVM stops the test unless qemu and the guest image are there
// (skip, or fail with $NODEKIT_REQUIRE_INTEGRATION set). Under -short it
// starts nothing.
func requireVM(t *testing.T) {
	t.Helper()
	itest.Short(t, "a qemu guest")
	itest.Require(t, "qemu and the guest image (hack/build-vm.sh)", Available(""))
}

// TestBoot boots the guest and checks what the tests that run there rely
// on: systemd is PID 1 on the unified cgroup v2 hierarchy with the
// controllers kubelet uses and PSI, the machine has no network device
// but loopback, the shares are mounted (read-only where asked), the
// script's output and exit code come back, and the image is not
// written.
func TestBoot(t *testing.T) {
	requireVM(t)
	_, ctx := ktesting.NewTestContext(t)
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "hello"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := Image("")
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(filepath.Join(img, ImageFile))
	if err != nil {
		t.Fatal(err)
	}
	script := `
echo "pid1=$(cat /proc/1/comm)"
echo "fstype=$(stat -fc %T /sys/fs/cgroup)"
echo "controllers=$(cat /sys/fs/cgroup/cgroup.controllers)"
echo "links=$(ls /sys/class/net | tr '\n' ' ')"
echo "hostname=$(hostname)"
test -r /sys/fs/cgroup/cpu.pressure && echo "psi=$(head -1 /sys/fs/cgroup/cpu.pressure | cut -d' ' -f1)"
echo "ro=$(cat /in/hello)"
touch /in/x 2>/dev/null && echo "ro share writable"
echo written >/out/result
exit 3
`
	res, err := Run(ctx, Config{
		WorkDir: t.TempDir(), Script: script, Timeout: 8 * time.Minute,
		Shares: []Share{{HostPath: ro, GuestPath: "/in", ReadOnly: true}, {HostPath: rw, GuestPath: "/out"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("accel %s: script started %.1fs after boot, run took %v\n%s", res.Accel, res.BootSeconds, res.Duration.Round(time.Second), res.Output)
	if res.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", res.ExitCode)
	}
	for _, want := range []string{"pid1=systemd\n", "fstype=cgroup2fs\n", "links=lo \n", "hostname=nodekit-vm\n", "psi=some\n", "ro=from the host\n"} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("guest output lacks %q", want)
		}
	}
	if strings.Contains(res.Output, "ro share writable") {
		t.Error("the read-only share was writable in the guest")
	}
	for _, c := range []string{"cpuset", "cpu", "io", "memory", "pids", "hugetlb"} {
		line := ""
		for l := range strings.Lines(res.Output) {
			if rest, ok := strings.CutPrefix(l, "controllers="); ok {
				line = rest
			}
		}
		if !strings.Contains(" "+strings.TrimSpace(line)+" ", " "+c+" ") {
			t.Errorf("cgroup v2 root controllers %q lack %s", line, c)
		}
	}
	if b, err := os.ReadFile(filepath.Join(rw, "result")); err != nil || string(b) != "written\n" {
		t.Errorf("the guest's write to the shared /out: %q, %v", b, err)
	}
	after, err := os.Stat(filepath.Join(img, ImageFile))
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
		t.Errorf("the image changed: %v %d -> %v %d", before.ModTime(), before.Size(), after.ModTime(), after.Size())
	}
	if b, _ := os.ReadFile(res.ConsoleLog); !strings.Contains(string(b), "Linux version") {
		t.Errorf("the console log %s has no kernel banner", res.ConsoleLog)
	}
}

// TestRunTimeout: a guest that does not finish is killed when the
// timeout passes, and the error says so.
func TestRunTimeout(t *testing.T) {
	requireVM(t)
	_, ctx := ktesting.NewTestContext(t)
	start := time.Now()
	_, err := Run(ctx, Config{WorkDir: t.TempDir(), Script: "sleep 3600", Timeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "did not finish within 5s") {
		t.Errorf("Run = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Run returned %v after the 5s timeout", d)
	}
}
