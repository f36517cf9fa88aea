package localvm

import (
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/agenttest/csitest"
)

// selinuxSuites are the tests of the SELinux volume paths that run
// against a real SELinux host with $NODEKIT_SELINUX=host
// (internal/selinux/selinuxtest): the host's detector, label translation
// and seclabel on the real kernel and policy; the volume manager's labels;
// CSI context mounts by the real test driver process; the runtime's
// selinux_relabel decision.
var selinuxSuites = []guestSuite{
	{pkg: "internal/selinux", run: "^(TestHostFileLabel|TestHostSupportsLabels|TestHostWithoutSELinux|TestSeclabel|TestFakeLabel)$",
		mustPass: []string{"TestHostFileLabel", "TestHostSupportsLabels"}, maySkip: []string{"TestHostWithoutSELinux"}},
	{pkg: "volumemgr", run: "^(TestSELinuxRelabel|TestSELinuxLabel|TestSELinuxLabelStable)$",
		mustPass: []string{"TestSELinuxRelabel", "TestSELinuxLabel", "TestSELinuxLabelStable"}},
	{pkg: "volumemgr/csi", run: "^(TestSELinuxMount|TestSELinuxNoContextMount|TestSELinuxLabelForgottenOnFailure|TestSELinuxMountAfterRestart)$",
		mustPass: []string{"TestSELinuxMount", "TestSELinuxNoContextMount", "TestSELinuxLabelForgottenOnFailure", "TestSELinuxMountAfterRestart"}},
	{pkg: "criruntime", run: "^TestSELinuxRelabelMounts$", mustPass: []string{"TestSELinuxRelabelMounts"}},
}

// selinuxPreamble checks, before the suites, that the guest runs SELinux
// as asked: the LSM list names it, selinuxfs has enforce (0: permissive),
// the policy is loaded (the shell runs in a domain, not "kernel").
const selinuxPreamble = `
echo "lsm: $(cat /sys/kernel/security/lsm)"
test -e /sys/fs/selinux/enforce
echo "enforce: $(cat /sys/fs/selinux/enforce) ($(getenforce))"
echo "context: $(cat /proc/self/attr/current | tr -d '\0')"
test "$(cat /proc/self/attr/current | tr -d '\0')" != kernel
sestatus | sed 's/^/sestatus: /'
`

// TestSELinux boots the guest with SELinux (localvm.SELinuxPermissive:
// Debian's reference policy, permissive) and runs selinuxSuites there
// with $NODEKIT_SELINUX=host, so the SELinux paths that run against the
// Fake on this machine run against a real kernel and policy; a suite that
// fails, or a test (or subtest) that skips unless a suite's maySkip lists
// it, fails it.
func TestSELinux(t *testing.T) {
	requireVM(t)
	_, ctx := ktesting.NewTestContext(t)
	out := runGuestSuites(ctx, t, guestRun{
		suites:     selinuxSuites,
		env:        "NODEKIT_SELINUX=host",
		kernelArgs: SELinuxPermissive(),
		preamble:   selinuxPreamble,
		commands:   map[string]string{csitest.DriverEnv: csitest.DriverPackage},
		strict:     true,
	})
	for _, want := range []string{"enforce: 0 (Permissive)", "selinux"} {
		if !strings.Contains(out, want) {
			t.Errorf("the guest's output lacks %q", want)
		}
	}
}
