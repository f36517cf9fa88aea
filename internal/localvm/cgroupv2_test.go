package localvm

import (
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// v2Suites are the tests that need a real unified cgroup v2 host. The
// systemd driver's tests run against the guest's own systemd (PID 1) with
// $NODEKIT_SYSTEMD=host.
var v2Suites = []guestSuite{
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
	runGuestSuites(ctx, t, guestRun{
		suites:   v2Suites,
		env:      "NODEKIT_SYSTEMD=host",
		preamble: `echo "cgroup: $(stat -fc %T /sys/fs/cgroup): $(cat /sys/fs/cgroup/cgroup.controllers)"`,
	})
}
