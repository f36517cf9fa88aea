package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/internal/localsystemd"
	"github.com/nodekit/nodekit/shutdown"
)

// TestNodeShutdownLogind: the agent runs against a private systemd with
// systemd-logind (its system bus in $DBUS_SYSTEM_BUS_ADDRESS, the agent in
// its PID namespace, as logind wants of lock holders) with
// shutdownGracePeriod 4s (2s for critical pods). It holds a delay lock;
// PowerOff asked of that logind stops the regular pod, then the critical
// one (each takes a second), both Failed/Terminated, and logind goes on
// only after that; once
// logind reports the (empty) shutdown over, the agent holds a lock again.
// graceful_node_shutdown_state and the two gauges have its start and end.
func TestNodeShutdownLogind(t *testing.T) {
	sd := agenttest.StartSystemd(t, localsystemd.Config{Logind: true})
	dir := filepath.Dir(sd.RunDir)
	conn, err := sd.Dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	login1 := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1")
	// The agent writes its drop-in to the host's /etc when logind's delay
	// is below the grace period: make sure it need not.
	var usec uint64
	if err := login1.CallWithContext(t.Context(), "org.freedesktop.DBus.Properties.Get", 0,
		"org.freedesktop.login1.Manager", "InhibitDelayMaxUSec").Store(&usec); err != nil || usec < 4e6 {
		t.Fatalf("private logind's InhibitDelayMaxUSec = %d, %v; want at least 4s", usec, err)
	}
	pid, err := sd.PID()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(systemdBusEnv, sd.BusAddress)
	// x509 authentication lets the API server's proxy read /metrics.
	e := startProcEnvWrapped(t, "shutdownGracePeriod: 4s\nshutdownGracePeriodCriticalPods: 2s\nauthentication:\n  x509:\n    clientCAFile: @CAFILE@\n",
		[]string{"nsenter", "--target", strconv.Itoa(pid), "--pid", "--"})
	t.Cleanup(func() { stopWrappedAgent(t, e.agent) })
	e.agent.waitLog(60*time.Second, "Node shutdown manager watching systemd-logind")
	held := func() bool { return kubeletLockHeld(t, login1) }
	if !held() {
		t.Fatal("the agent holds no delay lock for shutdown in logind")
	}
	// Each pod takes a second to stop, so the shutdown lasts 2s or more.
	slow := "trap 'sleep 1; exit 0' TERM; while true; do sleep 0.2; done"
	e.createPod(t, simplePod("regular", v1.RestartPolicyAlways, slow))
	critical := simplePod("critical", v1.RestartPolicyAlways, slow)
	critical.Spec.PriorityClassName = "system-node-critical"
	e.createPod(t, critical)
	for _, name := range []string{"regular", "critical"} {
		e.waitPod(t, name, 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	}

	logindLog := func() string { b, _ := os.ReadFile(filepath.Join(sd.RunDir, "logind.log")); return string(b) }
	// When logind goes on with the shutdown (the lock released or its
	// delay over), it logs "System is powering down".
	wentOn := make(chan time.Time, 1)
	go func() {
		for ctx := t.Context(); ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
			if strings.Contains(logindLog(), "System is powering down") {
				wentOn <- time.Now()
				return
			}
		}
	}()
	poweredOff := time.Now()
	privatePowerOff(t, sd, dir)
	finished := map[string]time.Time{}
	for _, name := range []string{"regular", "critical"} {
		p := e.waitPod(t, name, 30*time.Second, "terminated", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if p.Status.Reason != "Terminated" {
			t.Fatalf("%s: %s", name, describeStatus(p))
		}
		if cs := containerStatus(p, "app"); cs == nil || cs.State.Terminated == nil {
			t.Fatalf("%s: container not terminated: %s", name, describeStatus(p))
		} else {
			finished[name] = cs.State.Terminated.FinishedAt.Time
		}
	}
	if finished["critical"].Before(finished["regular"]) {
		t.Errorf("the critical pod ended at %v, before the regular one (%v)", finished["critical"], finished["regular"])
	}
	var at time.Time
	select {
	case at = <-wentOn:
	case <-time.After(15 * time.Second):
		t.Fatalf("logind did not go on with the shutdown:\n%s", logindLog())
	}
	// FinishedAt is in whole seconds (rounded down): logind must not have
	// gone on before the critical pod's second, nor before both pods'
	// seconds of stopping.
	if at.Before(finished["critical"]) || at.Sub(poweredOff) < 2*time.Second {
		t.Errorf("logind went on at %v, %v after PowerOff; the critical pod ended at %v", at, at.Sub(poweredOff), finished["critical"])
	}
	// The empty poweroff.target is reached, logind sends
	// PrepareForShutdown(false) and the agent takes a new lock.
	eventuallyFor(t, 15*time.Second, "a new lock after PrepareForShutdown(false)", held)
	// The state file and the gauges have the shutdown's start and end.
	st, err := shutdown.LoadState(filepath.Join(e.root, shutdown.StateFileName))
	if err != nil || st.StartTime.Before(poweredOff.Add(-time.Second)) || st.EndTime.Before(st.StartTime) {
		t.Errorf("graceful_node_shutdown_state = %+v, %v; want a start after %v and an end after it", st, err, poweredOff)
	}
	m, err := e.scrape(t.Context(), "metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := m["kubelet_graceful_shutdown_start_time_seconds"]; got != float64(st.StartTime.Unix()) {
		t.Errorf("kubelet_graceful_shutdown_start_time_seconds = %v, want %d", got, st.StartTime.Unix())
	}
	if got := m["kubelet_graceful_shutdown_end_time_seconds"]; got != float64(st.EndTime.Unix()) {
		t.Errorf("kubelet_graceful_shutdown_end_time_seconds = %v, want %d", got, st.EndTime.Unix())
	}
	if _, err := os.Stat("/etc/systemd/logind.conf.d/99-kubelet.conf"); err == nil {
		t.Error("a logind drop-in was written to the host's /etc")
	}
}

// privatePowerOff asks the PRIVATE logind to power off, from inside its
// PID namespace (logind wants the caller's PID), after checking that the
// address is the private systemd's and no other.
func privatePowerOff(t *testing.T, sd *localsystemd.Systemd, dir string) {
	t.Helper()
	want := "unix:path=" + filepath.Join(dir, "run", "dbus", "system_bus_socket")
	if sd.BusAddress != want || !strings.HasPrefix(dir, os.TempDir()+"/") {
		t.Fatalf("refusing PowerOff: bus %q is not the private systemd's %q", sd.BusAddress, want)
	}
	cmd, err := sd.Command("busctl", "--address="+want, "call", "org.freedesktop.login1", "/org/freedesktop/login1",
		"org.freedesktop.login1.Manager", "PowerOff", "b", "false")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("PowerOff on %s: %v\n%s", want, err, out)
	}
}

// kubeletLockHeld reports whether logind lists the agent's delay lock.
func kubeletLockHeld(t *testing.T, login1 dbus.BusObject) bool {
	t.Helper()
	var list []struct {
		What, Who, Why, Mode string
		UID, PID             uint32
	}
	if err := login1.CallWithContext(t.Context(), "org.freedesktop.login1.Manager.ListInhibitors", 0).Store(&list); err != nil {
		t.Fatalf("ListInhibitors: %v", err)
	}
	for _, l := range list {
		if l.What == "shutdown" && l.Who == "kubelet" && l.Mode == "delay" {
			return true
		}
	}
	return false
}

// stopWrappedAgent sends SIGTERM to the agent under nsenter (nsenter
// forwards no signal) and waits for both to end.
func stopWrappedAgent(t *testing.T, p *agentProcess) {
	if !p.running() {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.pid, p.pid))
	if f := strings.Fields(string(b)); err == nil && len(f) == 1 {
		if child, err := strconv.Atoi(f[0]); err == nil {
			_ = syscall.Kill(child, syscall.SIGTERM)
		}
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("the agent under nsenter still runs 30s after SIGTERM")
	}
}

func eventuallyFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
