package logind_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/localsystemd"
	"github.com/nodekit/nodekit/shutdown"
	"github.com/nodekit/nodekit/shutdown/logind"
)

// node is the private systemd a test body talks to: its bus, its logind
// drop-in directory and its Config.Dir.
type node struct{ BusAddress, ConfDir, Dir string }

const envNode = "NODEKIT_TEST_LOGIND_NODE"

// inNode runs body against a private systemd with systemd-logind. logind
// grants inhibitor locks only to callers in its PID namespace, so the
// test binary runs body there: the parent starts systemd and re-runs this
// test under nsenter; the child (envNode set) runs body.
func inNode(t *testing.T, body func(t *testing.T, n node)) {
	t.Helper()
	if v := os.Getenv(envNode); v != "" {
		var n node
		n.BusAddress, n.ConfDir, n.Dir, _ = cut3(v)
		body(t, n)
		return
	}
	itest.Short(t, "private systemd-logind")
	itest.Require(t, "private systemd-logind", localsystemd.Available())
	dir, err := os.MkdirTemp("", "nklg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sd, err := localsystemd.Start(t.Context(), localsystemd.Config{Dir: dir, Logind: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sd.Stop(context.WithoutCancel(t.Context())) })
	cmd, err := sd.Command(os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b, _ := os.ReadFile(filepath.Join(dir, "run", "logind.log")); t.Logf("logind.log:\n%s", b) })
	cmd.Env = append(os.Environ(), envNode+"="+strings.Join([]string{sd.BusAddress, sd.LogindConfDir(), dir}, "\n"))
	out, err := cmd.CombinedOutput()
	t.Logf("in systemd's PID namespace:\n%s", out)
	if err != nil {
		t.Fatalf("test body in the PID namespace: %v", err)
	}
}

func (n node) logindLog(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.Dir, "run", "logind.log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (n node) dial(t *testing.T) *dbus.Conn {
	t.Helper()
	conn, err := dbus.Connect(n.BusAddress, dbus.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

type inhibitor struct{ What, Who, Why, Mode string }

// inhibitors is logind's ListInhibitors.
func inhibitors(t *testing.T, conn *dbus.Conn) []inhibitor {
	t.Helper()
	var raw []struct {
		What, Who, Why, Mode string
		UID, PID             uint32
	}
	if err := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1").
		CallWithContext(t.Context(), "org.freedesktop.login1.Manager.ListInhibitors", 0).Store(&raw); err != nil {
		t.Fatalf("ListInhibitors: %v", err)
	}
	var out []inhibitor
	for _, r := range raw {
		out = append(out, inhibitor{r.What, r.Who, r.Why, r.Mode})
	}
	return out
}

var ourLock = inhibitor{"shutdown", logind.DefaultWho, logind.DefaultWhy, "delay"}

func holds(t *testing.T, conn *dbus.Conn) bool {
	t.Helper()
	for _, i := range inhibitors(t, conn) {
		if i == ourLock {
			return true
		}
	}
	return false
}

// eventually polls cond for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLockAndInhibitDelay(t *testing.T) { inNode(t, testLockAndInhibitDelay) }

func testLockAndInhibitDelay(t *testing.T, sd node) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	conn := sd.dial(t)
	if holds(t, conn) {
		t.Fatal("a lock before Watch")
	}
	// logind's default InhibitDelayMaxSec is 5s: 42s needs the drop-in.
	tr := logind.New(logind.Config{BusAddress: sd.BusAddress, ConfigDir: sd.ConfDir, GracePeriod: 42 * time.Second})
	if _, err := tr.Watch(ctx); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(sd.ConfDir, logind.DropInName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "[Login]\nInhibitDelayMaxSec=42\n") {
		t.Errorf("drop-in:\n%s", b)
	}
	if got := tr.InhibitDelay(); got != 42*time.Second {
		t.Errorf("InhibitDelay = %v, want 42s", got)
	}
	var usec uint64
	if err := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1").CallWithContext(ctx,
		"org.freedesktop.DBus.Properties.Get", 0, "org.freedesktop.login1.Manager", "InhibitDelayMaxUSec").Store(&usec); err != nil {
		t.Fatal(err)
	}
	if usec != 42e6 {
		t.Errorf("logind InhibitDelayMaxUSec = %d, want 42e6", usec)
	}
	if !holds(t, conn) {
		t.Fatalf("lock %v not among logind's inhibitors %v", ourLock, inhibitors(t, conn))
	}
	if err := tr.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "lock released", func() bool { return !holds(t, conn) })
}

// powerOff asks the PRIVATE logind to power off. It refuses any bus but
// the private systemd's, so the host is never asked.
func powerOff(t *testing.T, sd node) {
	t.Helper()
	want := "unix:path=" + filepath.Join(sd.Dir, "run", "dbus", "system_bus_socket")
	if sd.BusAddress != want || sd.Dir == "" || !strings.HasPrefix(sd.Dir, os.TempDir()+"/") {
		t.Fatalf("refusing PowerOff: bus %q is not the private systemd's %q", sd.BusAddress, want)
	}
	conn := sd.dial(t)
	if err := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1").CallWithContext(t.Context(),
		"org.freedesktop.login1.Manager.PowerOff", 0, false).Err; err != nil {
		t.Fatalf("PowerOff on %s: %v", sd.BusAddress, err)
	}
}

type recordingKiller struct {
	mu     sync.Mutex
	killed []string
}

func (k *recordingKiller) KillPod(_ context.Context, p *v1.Pod, _ int64, _ func(*v1.PodStatus)) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.killed = append(k.killed, p.Name)
	return nil
}

func TestPowerOffRunsShutdownThenReleases(t *testing.T) { inNode(t, testPowerOff) }

func testPowerOff(t *testing.T, sd node) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	conn := sd.dial(t)
	pods := []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u1"}}}
	killer := &recordingKiller{}
	gate := make(chan struct{})
	m, err := shutdown.New(shutdown.Config{
		Groups:     []shutdown.Group{{Priority: 0, GracePeriodSeconds: 3}},
		ActivePods: func() []*v1.Pod { <-gate; return pods },
		Killer:     killer,
	})
	if err != nil {
		t.Fatal(err)
	}
	// InhibitDelayMaxSec 60: logind waits for the lock, not a timeout.
	tr := logind.New(logind.Config{BusAddress: sd.BusAddress, ConfigDir: sd.ConfDir, GracePeriod: time.Minute})
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, tr) }()
	eventually(t, "lock taken", func() bool { return holds(t, conn) })

	powerOff(t, sd)
	eventually(t, "node shutting down", m.ShuttingDown)
	// Shutdown is held in ActivePods: the delay lock must still be there,
	// and logind waiting for it.
	if !holds(t, conn) {
		t.Fatal("lock released before Shutdown returned")
	}
	if log := sd.logindLog(t); strings.Contains(log, "System is powering down") {
		t.Fatalf("logind went on before the lock was released:\n%s", log)
	}
	close(gate)
	eventually(t, "logind going on once Shutdown returned", func() bool {
		return strings.Contains(sd.logindLog(t), "System is powering down")
	})
	// The (empty) poweroff.target is reached and logind reports the
	// operation over (PrepareForShutdown(false)): as upstream, the node is
	// no longer shutting down and a new lock is held.
	eventually(t, "new lock after PrepareForShutdown(false)", func() bool { return !m.ShuttingDown() && holds(t, conn) })
	killer.mu.Lock()
	if len(killer.killed) != 1 || killer.killed[0] != "p" {
		t.Errorf("killed %v, want [p]", killer.killed)
	}
	killer.mu.Unlock()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}

func cut3(v string) (a, b, c string, ok bool) {
	f := strings.Split(v, "\n")
	if len(f) != 3 {
		return "", "", "", false
	}
	return f[0], f[1], f[2], true
}

// A drop-in logind does not read leaves InhibitDelayMaxSec at its 5s
// default: as upstream's manager, Watch then fails and takes no lock.
func TestInhibitDelayStillTooSmall(t *testing.T) { inNode(t, testDelayTooSmall) }

func testDelayTooSmall(t *testing.T, sd node) {
	conn := sd.dial(t)
	tr := logind.New(logind.Config{BusAddress: sd.BusAddress, ConfigDir: filepath.Join(sd.Dir, "not-read"), GracePeriod: time.Minute})
	_, err := tr.Watch(t.Context())
	if !errors.Is(err, logind.ErrDelayTooSmall) {
		t.Fatalf("Watch = %v, want ErrDelayTooSmall", err)
	}
	if got := tr.InhibitDelay(); got != 5*time.Second {
		t.Errorf("InhibitDelay = %v, want logind's default 5s", got)
	}
	if holds(t, conn) || tr.Holding() {
		t.Error("a lock is held after Watch failed")
	}
}
