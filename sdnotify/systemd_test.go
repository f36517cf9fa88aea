package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/internal/localsystemd"
)

// helperEnv makes the test binary act as a notify service (helperMain)
// instead of running tests: "healthy" pets the watchdog, "unhealthy"
// does not.
const helperEnv = "NODEKIT_SDNOTIFY_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperMain is an agent as systemd runs it: READY=1, then the watchdog
// from the environment systemd set.
func helperMain(mode string) int {
	ctx := context.Background()
	n := FromEnv(os.Getenv)
	timeout, err := WatchdogTimeout(os.Getenv, os.Getpid())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	check := func() error { return nil }
	if mode == "unhealthy" {
		check = func() error { return errors.New("unhealthy on purpose") }
	}
	w, err := NewWatchdog(WatchdogConfig{Notifier: n, Timeout: timeout, Check: check})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if sent, err := n.Notify(ctx, Ready); !sent || err != nil {
		fmt.Fprintln(os.Stderr, "READY=1 not sent:", sent, err)
		return 1
	}
	_ = w.Run(ctx)
	return 0
}

func startNotifyService(t *testing.T, conn *sddbus.Conn, unit, mode string, watchdog time.Duration) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 1)
	_, err = conn.StartTransientUnitContext(t.Context(), unit, "replace", []sddbus.Property{
		{Name: "Type", Value: dbus.MakeVariant("notify")},
		{Name: "NotifyAccess", Value: dbus.MakeVariant("main")},
		{Name: "DefaultDependencies", Value: dbus.MakeVariant(false)},
		{Name: "Environment", Value: dbus.MakeVariant([]string{helperEnv + "=" + mode})},
		{Name: "WatchdogUSec", Value: dbus.MakeVariant(uint64(watchdog / time.Microsecond))},
		{Name: "TimeoutStartUSec", Value: dbus.MakeVariant(uint64(20 * time.Second / time.Microsecond))},
		sddbus.PropExecStart([]string{exe}, false),
	}, ch)
	if err != nil {
		t.Fatal(err)
	}
	return <-ch
}

func serviceProp(t *testing.T, conn *sddbus.Conn, unit, name string) string {
	t.Helper()
	p, err := conn.GetServicePropertyContext(t.Context(), unit, name)
	if err != nil {
		t.Fatalf("%s %s: %v", unit, name, err)
	}
	return fmt.Sprint(p.Value.Value())
}

func unitProp(t *testing.T, conn *sddbus.Conn, unit, name string) string {
	t.Helper()
	p, err := conn.GetUnitPropertyContext(t.Context(), unit, name)
	if err != nil {
		t.Fatalf("%s %s: %v", unit, name, err)
	}
	return fmt.Sprint(p.Value.Value())
}

// TestNotifyServiceRealSystemd runs this package as a Type=notify service
// of a real systemd with a 2s watchdog: the start job finishes only once
// systemd has READY=1; a healthy service is still running three timeouts
// later, and one whose health check fails is killed by systemd for the
// watchdog.
func TestNotifyServiceRealSystemd(t *testing.T) {
	sd := agenttest.StartSystemd(t, localsystemd.Config{})
	conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) { return sd.Dial(context.WithoutCancel(t.Context())) })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const timeout = 2 * time.Second

	start := time.Now()
	if res := startNotifyService(t, conn, "nodekit-healthy.service", "healthy", timeout); res != "done" {
		t.Fatalf("start of the notify service: %s (Result %s)", res, serviceProp(t, conn, "nodekit-healthy.service", "Result"))
	}
	t.Logf("systemd had READY=1 %v after the start", time.Since(start).Round(time.Millisecond))
	if s := serviceProp(t, conn, "nodekit-healthy.service", "StatusErrno"); s != "0" {
		t.Errorf("StatusErrno %s", s)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 3*timeout, false, func(context.Context) (bool, error) {
		return unitProp(t, conn, "nodekit-healthy.service", "ActiveState") != "active", nil
	}); !wait.Interrupted(err) {
		t.Fatalf("the healthy service left active within %v: %s, Result %s", 3*timeout,
			unitProp(t, conn, "nodekit-healthy.service", "ActiveState"), serviceProp(t, conn, "nodekit-healthy.service", "Result"))
	}
	pets, _ := strconv.ParseUint(serviceProp(t, conn, "nodekit-healthy.service", "WatchdogTimestampMonotonic"), 10, 64)
	if pets == 0 {
		t.Error("systemd saw no WATCHDOG=1 from the healthy service")
	}

	if res := startNotifyService(t, conn, "nodekit-unhealthy.service", "unhealthy", timeout); res != "done" {
		t.Fatalf("start of the unhealthy notify service: %s", res)
	}
	var result string
	if err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 5*timeout, false, func(context.Context) (bool, error) {
		result = serviceProp(t, conn, "nodekit-unhealthy.service", "Result")
		return result == "watchdog", nil
	}); err != nil {
		t.Fatalf("the unhealthy service's Result is %q after %v, want watchdog", result, 5*timeout)
	}
}
