package agenttest

import (
	"context"
	"os"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/internal/localsystemd"
)

// StartSystemd starts a private systemd (internal/localsystemd) for t,
// in a short temporary directory of its own unless cfg.Dir names one,
// and stops it at cleanup, after logging the end of its console when t
// failed. Without root, systemd or dbus-daemon the test is skipped (or
// fails, with $NODEKIT_REQUIRE_INTEGRATION set); with -short it is
// skipped. Register it before what runs under that systemd, so that its
// cleanup runs last.
func StartSystemd(t testing.TB, cfg localsystemd.Config) *localsystemd.Systemd {
	t.Helper()
	SkipShort(t, "private systemd")
	RequireIntegration(t, "private systemd", localsystemd.Available())
	if cfg.Dir == "" {
		// Not t.TempDir(): the bus socket's path must stay short.
		dir, err := os.MkdirTemp("", "nksd")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		cfg.Dir = dir
	}
	_, ctx := ktesting.NewTestContext(t)
	sd, err := localsystemd.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(sd.ConsoleLog)
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			t.Logf("systemd console (last lines):\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
		if err := sd.Stop(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("agenttest: stop systemd: %v", err)
		}
	})
	return sd
}
