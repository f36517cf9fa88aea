package selinuxtest

import (
	"errors"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/selinux"
)

// HostEnv, set to "host", makes Enabled return the real host's SELinux.
const HostEnv = "NODEKIT_SELINUX"

// Host is an SELinux host as the volume code sees it (volumemgr.SELinux,
// csi.PluginConfig.SELinux, criruntime.SELinuxHost's Enabled).
type Host interface {
	Enabled() bool
	FileLabel(opts *v1.SELinuxOptions) (string, error)
	SupportsLabels(path string) (bool, error)
}

var (
	_ Host = selinux.Host{}
	_ Host = selinux.Fake{}
)

// Real reports whether $NODEKIT_SELINUX=host asks for the real host.
func Real() bool { return os.Getenv(HostEnv) == "host" }

// Enabled returns the SELinux-enabled host a test runs against:
// selinux.Fake{}, or with $NODEKIT_SELINUX=host selinux.Host{} once it
// says SELinux is enabled here (else the test is skipped, or fails with
// $NODEKIT_REQUIRE_INTEGRATION set).
func Enabled(t testing.TB) Host {
	t.Helper()
	if !Real() {
		return selinux.Fake{}
	}
	var missing error
	if !(selinux.Host{}).Enabled() {
		missing = errors.New("SELinux is not enabled on this host (no selinuxfs, or no policy loaded)")
	}
	itest.Require(t, "SELinux on this host ($"+HostEnv+"=host)", missing)
	return selinux.Host{}
}
