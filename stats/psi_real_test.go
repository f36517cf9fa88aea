package stats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/internal/cgroot"
	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/psi"
)

// TestSummaryPressureRealV2 reads the Summary's pressure blocks from a
// real unified cgroup v2 hierarchy: a pod cgroup of the test's own with
// a container cgroup (named by its ID, as the cgroupfs driver names it)
// running CPU-bound processes. The kernel's own totals, read before and
// after the Summary, bound what the pod and container blocks report; the
// node block is the root's. On a v1 machine it is skipped: there the
// blocks are zeros by design (TestSummaryPressureV1), and
// internal/localvm's TestCgroupV2 runs this test in a v2 guest.
func TestSummaryPressureRealV2(t *testing.T) {
	itest.Short(t, "a cgroup v2 cgroup with CPU-bound processes")
	m := Machine{ProcDir: "/proc", CgroupDir: "/sys/fs/cgroup"}
	if !m.unified() {
		t.Skip("/sys/fs/cgroup is not a unified cgroup v2 hierarchy (internal/localvm's TestCgroupV2 runs this test in a guest where it is)")
	}
	var err error
	if os.Geteuid() != 0 {
		err = errors.New("not root: cannot create a cgroup")
	} else if _, err = os.Stat(m.cgroup(psi.CPUFile)); err != nil {
		err = fmt.Errorf("no PSI (boot with psi=1): %w", err)
	}
	itest.Require(t, "a cgroup v2 hierarchy with PSI (root)", err)

	r, err := cgroot.Create(fmt.Sprintf("nodekit-psi-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Remove(); err != nil {
			t.Error(err)
		}
	})
	// The pod cgroup hands its controllers down, as the cgroup drivers
	// leave a pod cgroup for the runtime.
	pod, ctr := r.Name, r.Name+"/c2"
	if err := os.WriteFile(m.cgroup(filepath.Join(pod, "cgroup.subtree_control")), []byte("+cpu +memory +io"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.cgroup(ctr), 0o755); err != nil {
		t.Fatal(err)
	}
	spin(t, m.cgroup(ctr), runtime.NumCPU()+1)
	// Wait until the kernel has counted some pressure.
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return someTotal(t, m.cgroup(ctr)) > 0, nil
	}); err != nil {
		t.Fatalf("no CPU pressure in %s after 30s of %d busy processes", ctr, runtime.NumCPU()+1)
	}
	before := map[string]uint64{"pod": someTotal(t, m.cgroup(pod)), "app": someTotal(t, m.cgroup(ctr)), "node": someTotal(t, m.cgroup("/"))}

	root := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	cri := &fakeCRI{mount: root, noSandbox: true, containers: []*runtimeapi.ContainerStats{ctrStats("c2", "app", 0, 1e9, 10, 1, clk.Now())}}
	p, err := New(Config{RootDir: root, PodLogsDir: filepath.Join(root, "logs"), Runtime: cri, Clock: clk,
		Machine: m, PodCgroups: fakePodCgroups{"uid-1": pod}})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := p.Summary(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	after := map[string]uint64{"pod": someTotal(t, m.cgroup(pod)), "app": someTotal(t, m.cgroup(ctr)), "node": someTotal(t, m.cgroup("/"))}
	blocks := psiBlocks(sum)
	for _, where := range []string{"node", "pod", "app"} {
		cpu := blocks[where+"/cpu"]
		if cpu == nil {
			t.Errorf("%s: no CPU pressure block", where)
			continue
		}
		if cpu.Some.Total < before[where] || cpu.Some.Total > after[where] || cpu.Some.Total == 0 {
			t.Errorf("%s: cpu some total %d, want the kernel's, within %d..%d", where, cpu.Some.Total, before[where], after[where])
		}
		if io := blocks[where+"/io"]; io == nil || io.Some.Total == noIO.Some.Total {
			t.Errorf("%s: no IO pressure block", where)
		}
		t.Logf("%s: cpu %+v", where, cpu.Some)
	}
	// memory.max exists in every non-root cgroup the memory controller
	// is enabled for, as here: a memory block each.
	for _, where := range []string{"node", "pod", "app"} {
		if blocks[where+"/memory"] == nil {
			t.Errorf("%s: no memory pressure block", where)
		}
	}
	if sum.Node.CPU.PSI.Some.Avg10 <= 0 && blocks["app/cpu"].Some.Avg10 <= 0 {
		t.Errorf("the busy container's avg10 is %v", blocks["app/cpu"].Some.Avg10)
	}
}

// spin starts CPU-bound shell loops in cgroup d (cgroot.Remove kills
// them; the cleanup reaps them).
func spin(t *testing.T, d string, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// someTotal is the "some" line's total= of cgroup dir's cpu.pressure,
// found by the test itself rather than by the parser under test.
func someTotal(t *testing.T, dir string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cpu.pressure"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 5 && f[0] == "some" && strings.HasPrefix(f[4], "total=") {
			if n, err := strconv.ParseUint(f[4][len("total="):], 10, 64); err == nil {
				return n
			}
		}
	}
	t.Fatalf("%s/cpu.pressure has no some total: %q", dir, b)
	return 0
}
