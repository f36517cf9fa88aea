package localvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/internal/localcp"
)

// v2Suite is a package whose tests run in the guest: the test binary
// (go test -c), the tests to run, and those that must pass there (not
// skip: the guest is the v2 host they wait for).
type v2Suite struct {
	pkg      string
	run      string
	mustPass []string
}

// v2Suites are the tests that need a real unified cgroup v2 host. The
// systemd driver's tests run against the guest's own systemd (PID 1) with
// $NODEKIT_SYSTEMD=host.
var v2Suites = []v2Suite{
	{pkg: "cgroupmgr", run: "^(TestRealCgroups|TestRealCgroup2Subtree|TestSystemdDriverRealSystemd|TestSystemdDriverQOSReserved|TestSystemdDriverRuncScope|TestDetectVersion)$",
		mustPass: []string{"TestRealCgroups", "TestSystemdDriverRealSystemd", "TestSystemdDriverQOSReserved", "TestSystemdDriverRuncScope"}},
	{pkg: "containermetrics", run: "^TestPressureSeriesRealCgroup$", mustPass: []string{"TestPressureSeriesRealCgroup"}},
	{pkg: "stats", run: "^TestSummaryPressureRealV2$", mustPass: []string{"TestSummaryPressureRealV2"}},
}

// TestCgroupV2 builds the test binaries of v2Suites on the host, boots
// the guest (hack/build-vm.sh's Debian 12, systemd on the unified
// hierarchy) and runs them there as root with
// $NODEKIT_REQUIRE_INTEGRATION set; it fails with a suite's output when
// the suite fails or a test that must pass did not. It lives here rather
// than in cgroupmgr because one boot serves every package's tests.
func TestCgroupV2(t *testing.T) {
	requireVM(t)
	_, ctx := ktesting.NewTestContext(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go (to build the test binaries): %v", err)
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	module := filepath.Dir(strings.TrimSpace(string(out)))
	work := t.TempDir()
	start := time.Now()
	for _, s := range v2Suites {
		build := exec.Command(goBin, "test", "-c", "-o", filepath.Join(work, s.pkg+".test"), "./"+s.pkg)
		build.Dir = module
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go test -c ./%s: %v\n%s", s.pkg, err, out)
		}
	}
	t.Logf("built %d test binaries in %v", len(v2Suites), time.Since(start).Round(time.Second))

	shares := []Share{{HostPath: module, ReadOnly: true}, {HostPath: work}}
	env := "NODEKIT_REQUIRE_INTEGRATION=1 NODEKIT_SYSTEMD=host"
	// The bin dir (busybox and runc's test bundle, ...) at the same path.
	if bin, err := localcp.FindBinDir(); err == nil {
		if _, err := os.Stat(bin); err == nil {
			shares = append(shares, Share{HostPath: bin, ReadOnly: true})
			env += " NODEKIT_BIN_DIR=" + shq(bin)
		}
	}
	res, err := Run(ctx, Config{WorkDir: t.TempDir(), Script: suiteScript(module, work, env), Shares: shares, Timeout: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest (%s) ran the suites: the script started %.0fs after boot, the run took %v\n%s",
		res.Accel, res.BootSeconds, res.Duration.Round(time.Second), res.Output)
	for _, s := range v2Suites {
		log, err := os.ReadFile(filepath.Join(work, s.pkg+".log"))
		if err != nil {
			t.Errorf("%s: no output from the guest: %v", s.pkg, err)
			continue
		}
		rc, _ := os.ReadFile(filepath.Join(work, s.pkg+".rc"))
		if strings.TrimSpace(string(rc)) != "0" {
			t.Errorf("%s failed in the guest (exit %s):\n%s", s.pkg, strings.TrimSpace(string(rc)), log)
			continue
		}
		for _, name := range s.mustPass {
			if !regexp.MustCompile(`(?m)^--- PASS: ` + name + ` `).Match(log) {
				t.Errorf("%s: %s did not pass in the guest:\n%s", s.pkg, name, log)
			}
		}
	}
}

// suiteScript runs each suite's binary in its package directory (for
// testdata) with its output and exit status in work.
func suiteScript(module, work, env string) string {
	var b strings.Builder
	b.WriteString("echo \"cgroup: $(stat -fc %T /sys/fs/cgroup): $(cat /sys/fs/cgroup/cgroup.controllers)\"\n")
	for _, s := range v2Suites {
		fmt.Fprintf(&b, "echo \"== %s\"\n", s.pkg)
		fmt.Fprintf(&b, "(cd %s && env %s %s -test.v -test.count=1 -test.timeout=10m -test.run %s) >%s 2>&1; echo $? >%s\n",
			shq(filepath.Join(module, s.pkg)), env, shq(filepath.Join(work, s.pkg+".test")), shq(s.run),
			shq(filepath.Join(work, s.pkg+".log")), shq(filepath.Join(work, s.pkg+".rc")))
		fmt.Fprintf(&b, "grep -E '^(--- |ok|FAIL|PASS)|^ +[a-z_0-9]+_test.go:[0-9]+: ' %s\n", shq(filepath.Join(work, s.pkg+".log")))
	}
	return b.String()
}
