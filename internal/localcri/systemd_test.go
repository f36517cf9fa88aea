package localcri

import (
	"context"
	"slices"
	"testing"
)

// Under Config.Systemd, what the instance runs goes through the Enter
// prefix, and runc uses the systemd cgroup driver.
func TestSystemdEnter(t *testing.T) {
	plain := instanceState{RuncRoot: "/d/runc"}
	entered := instanceState{RuncRoot: "/d/runc", Enter: []string{"nsenter", "--target", "7", "--pid", "--"}}
	if got := plain.command(context.Background(), "/bin/runc", "list").Args; !slices.Equal(got, []string{"/bin/runc", "list"}) {
		t.Errorf("without Enter: %q", got)
	}
	if got := entered.command(context.Background(), "/bin/runc", "list").Args; !slices.Equal(got, []string{"nsenter", "--target", "7", "--pid", "--", "/bin/runc", "list"}) {
		t.Errorf("with Enter: %q", got)
	}
	if got := runcArgs(plain, "delete", "x"); !slices.Equal(got, []string{"--root", "/d/runc/k8s.io", "delete", "x"}) {
		t.Errorf("runc args without Enter: %q", got)
	}
	if got := runcArgs(entered, "delete", "x"); !slices.Equal(got, []string{"--root", "/d/runc/k8s.io", "--systemd-cgroup", "delete", "x"}) {
		t.Errorf("runc args with Enter: %q", got)
	}
	if err := validateSystemd(&Systemd{}); err == nil {
		t.Error("an empty Config.Systemd.Enter was accepted")
	}
	if err := validateSystemd(&Systemd{Enter: []string{"/nonexistent/nsenter"}}); err == nil {
		t.Error("a missing Enter command was accepted")
	}
	if err := validateSystemd(nil); err != nil {
		t.Errorf("no Config.Systemd: %v", err)
	}
}
