package localsystemd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/localsystemd"
)

// shortDir is a temporary directory with a path short enough for sockets.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "nksd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func TestStartStop(t *testing.T) {
	itest.Short(t, "private systemd")
	itest.Require(t, "private systemd", localsystemd.Available())
	ctx := t.Context()
	dir := shortDir(t)
	sd, err := localsystemd.Start(ctx, localsystemd.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = sd.Stop(context.WithoutCancel(ctx))
		}
	})
	state, err := sd.SystemState(ctx)
	if err != nil || (state != "running" && state != "degraded") {
		t.Fatalf("SystemState = %q, %v; want running", state, err)
	}
	pid, err := sd.PID()
	if err != nil {
		t.Fatal(err)
	}
	// systemd is PID 1 of its namespace and sits in the cgroup made for it.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "NSpid:\t"+fmt.Sprint(pid)+"\t1\n") {
		t.Errorf("systemd (pid %d) is not PID 1 of its namespace:\n%s", pid, status)
	}
	for _, h := range []string{"memory", "pids", "systemd", "unified"} {
		init := filepath.Join("/sys/fs/cgroup", h, sd.CgroupBase, "init.scope")
		if _, err := os.Stat(init); err != nil {
			t.Errorf("%s: %v (systemd does not own %s)", h, err, sd.CgroupBase)
		}
	}
	if err := sd.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("systemd (pid %d) still there after Stop: %v", pid, err)
	}
	for _, h := range []string{"memory", "pids", "systemd", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, sd.CgroupBase)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left in %s: %v", sd.CgroupBase, h, err)
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), dir) {
		t.Errorf("mounts of %s left on the host:\n%s", dir, mi)
	}
}

func TestLogind(t *testing.T) {
	itest.Short(t, "private systemd")
	itest.Require(t, "private systemd", localsystemd.Available())
	ctx := t.Context()
	sd, err := localsystemd.Start(ctx, localsystemd.Config{Dir: shortDir(t), Logind: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sd.Stop(context.WithoutCancel(ctx)) })
	conn, err := sd.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	login1 := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1")
	v, err := login1.GetProperty("org.freedesktop.login1.Manager.InhibitDelayMaxUSec")
	if err != nil {
		t.Fatalf("InhibitDelayMaxUSec: %v\n%s", err, readLog(t, sd))
	}
	if d, ok := v.Value().(uint64); !ok || d == 0 {
		t.Errorf("InhibitDelayMaxUSec = %v, want a positive uint64", v)
	}
	var inhibitors [][]any
	if err := login1.CallWithContext(ctx, "org.freedesktop.login1.Manager.ListInhibitors", 0).Store(&inhibitors); err != nil {
		t.Fatalf("ListInhibitors: %v", err)
	}
	if !strings.HasPrefix(sd.LogindConfDir(), sd.RunDir+"/") {
		t.Errorf("LogindConfDir %s is not below the namespace's /run %s", sd.LogindConfDir(), sd.RunDir)
	}
}

func readLog(t *testing.T, sd *localsystemd.Systemd) string {
	t.Helper()
	b, _ := os.ReadFile(sd.ConsoleLog)
	return string(b)
}
