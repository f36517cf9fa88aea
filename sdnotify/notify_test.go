package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
)

// listen opens a unix datagram socket as systemd's notify socket.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// pending returns the next datagram queued on conn, without waiting.
func pending(t *testing.T, conn *net.UnixConn) (string, bool) {
	t.Helper()
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var n int
	var rerr error
	if err := raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if errors.Is(rerr, unix.EAGAIN) {
		return "", false
	}
	if rerr != nil {
		t.Fatal(rerr)
	}
	return string(buf[:n]), true
}

func TestNotify(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@nodekit-sdnotify-test-%08x", rand.Uint32()), // abstract, as systemd may name it
	} {
		conn := listen(t, name)
		n := FromEnv(func(k string) string { return map[string]string{SocketEnv: name}[k] })
		sent, err := n.Notify(t.Context(), Ready)
		if err != nil || !sent {
			t.Fatalf("Notify to %s = %v, %v", name, sent, err)
		}
		if got, ok := pending(t, conn); !ok || got != "READY=1" {
			t.Errorf("%s received %q (%v), want READY=1", name, got, ok)
		}
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	for _, n := range []*Notifier{nil, {}, FromEnv(func(string) string { return "" })} {
		if sent, err := n.Notify(t.Context(), Ready); sent || err != nil {
			t.Errorf("Notify without a socket = %v, %v; want false, nil", sent, err)
		}
	}
	n := New(filepath.Join(t.TempDir(), "nobody-listens"))
	if sent, err := n.Notify(t.Context(), Ready); sent || err == nil || !strings.Contains(err.Error(), SocketEnv) {
		t.Errorf("Notify to a missing socket = %v, %v; want an error naming %s", sent, err, SocketEnv)
	}
}

func TestWatchdogTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    time.Duration
		wantErr string
	}{
		{name: "off", env: map[string]string{}},
		{name: "for this pid", env: map[string]string{WatchdogUSEnv: "30000000", WatchdogPIDEnv: "42"}, want: 30 * time.Second},
		{name: "without a pid", env: map[string]string{WatchdogUSEnv: "3000000"}, want: 3 * time.Second},
		{name: "for another pid", env: map[string]string{WatchdogUSEnv: "30000000", WatchdogPIDEnv: "7"}},
		{name: "bad usec", env: map[string]string{WatchdogUSEnv: "30s"}, wantErr: WatchdogUSEnv},
		{name: "zero usec", env: map[string]string{WatchdogUSEnv: "0"}, wantErr: WatchdogUSEnv},
		{name: "bad pid", env: map[string]string{WatchdogUSEnv: "30000000", WatchdogPIDEnv: "x"}, wantErr: WatchdogPIDEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WatchdogTimeout(func(k string) string { return tc.env[k] }, 42)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("WatchdogTimeout = %v, %v; want an error naming %s", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("WatchdogTimeout = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestNewWatchdog(t *testing.T) {
	n := New(filepath.Join(t.TempDir(), "notify"))
	if _, err := NewWatchdog(WatchdogConfig{Notifier: n, Timeout: time.Second}); err == nil {
		t.Error("a 1s watchdog timeout accepted; upstream refuses it")
	}
	if _, err := NewWatchdog(WatchdogConfig{Timeout: 10 * time.Second}); err == nil || !strings.Contains(err.Error(), SocketEnv) {
		t.Errorf("a watchdog without a notify socket: %v, want an error naming %s", err, SocketEnv)
	}
	w, err := NewWatchdog(WatchdogConfig{Notifier: n, Timeout: 10 * time.Second})
	if err != nil || w.Interval() != 5*time.Second {
		t.Fatalf("NewWatchdog = %v, %v; want a 5s interval", w, err)
	}
	off, err := NewWatchdog(WatchdogConfig{Notifier: n})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	if err := off.Run(ctx); err != nil || off.Interval() != 0 {
		t.Errorf("Run of an off watchdog = %v (interval %v), want nil at once", err, off.Interval())
	}
}

func TestWatchdogStepHealth(t *testing.T) {
	name := filepath.Join(t.TempDir(), "notify")
	conn := listen(t, name)
	healthy := errors.New("sync loop stuck")
	w, err := NewWatchdog(WatchdogConfig{Notifier: New(name), Timeout: 4 * time.Second, Check: func() error { return healthy }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Step(t.Context()); err == nil || !strings.Contains(err.Error(), "sync loop stuck") {
		t.Errorf("Step while unhealthy = %v, want the check's error", err)
	}
	if got, ok := pending(t, conn); ok {
		t.Errorf("an unhealthy agent petted the watchdog: %q", got)
	}
	healthy = nil
	if err := w.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, ok := pending(t, conn); !ok || got != "WATCHDOG=1" {
		t.Errorf("received %q (%v), want WATCHDOG=1", got, ok)
	}
}

// TestWatchdogRetries: a send that fails is tried again 1s and then 2s
// later, as upstream's back-off; after the third failure Step gives up.
func TestWatchdogRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "notify")
		w, err := NewWatchdog(WatchdogConfig{Notifier: New(name), Timeout: 4 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- w.Step(t.Context()) }()
		synctest.Wait() // the first send failed: nobody listens yet
		time.Sleep(500 * time.Millisecond)
		conn := listen(t, name)
		if err := <-done; err != nil {
			t.Fatalf("Step = %v, want the retry to succeed", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("retried after %v, want 1s", d)
		}
		if got, ok := pending(t, conn); !ok || got != "WATCHDOG=1" {
			t.Errorf("received %q (%v)", got, ok)
		}
		conn.Close()

		start = time.Now()
		if err := w.Step(t.Context()); err == nil {
			t.Error("Step with nobody listening succeeded")
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("gave up after %v, want 3s (retries 1s and 2s later)", d)
		}
	})
}

// TestWatchdogRun: Run pets at once and then every half timeout.
func TestWatchdogRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "notify")
		conn := listen(t, name)
		w, err := NewWatchdog(WatchdogConfig{Notifier: New(name), Timeout: 4 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		count := func() int {
			n := 0
			for {
				got, ok := pending(t, conn)
				if !ok {
					return n
				}
				if got != "WATCHDOG=1" {
					t.Errorf("received %q", got)
				}
				n++
			}
		}
		synctest.Wait()
		if n := count(); n != 1 {
			t.Errorf("%d pets at start, want 1", n)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := count(); n != 2 {
			t.Errorf("%d pets in the next 5s, want 2 (every 2s)", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}
