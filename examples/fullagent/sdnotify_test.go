package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSystemdNotifyConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if _, err := newSystemdNotify(env(map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1000000"}), 1, nil); err == nil || !strings.Contains(err.Error(), "WATCHDOG_USEC") {
		t.Errorf("a 1s watchdog: %v, want refused as upstream", err)
	}
	if _, err := newSystemdNotify(env(map[string]string{}), 1, nil); err != nil {
		t.Errorf("no systemd: %v", err)
	}
}

// readDatagram reads one message from the notify socket within d.
func readDatagram(t *testing.T, conn *net.UnixConn, d time.Duration) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no message on the notify socket within %v: %v", d, err)
	}
	return string(buf[:n])
}

// TestAgentNotifiesSystemd: run as a Type=notify service with a watchdog
// (the environment systemd gives it), the agent sends READY=1 once it
// runs, by which time its node is registered, and then pets the
// watchdog.
func TestAgentNotifiesSystemd(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Set once etcd, kube-apiserver and containerd run: they would
	// notify the socket too.
	e := startEnv(t, envOption{before: func(*env) {
		t.Setenv("NOTIFY_SOCKET", socket)
		t.Setenv("WATCHDOG_USEC", "4000000")
		t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	}})
	if got := readDatagram(t, conn, 90*time.Second); got != "READY=1" {
		t.Fatalf("first message %q, want READY=1", got)
	}
	if _, err := e.client.CoreV1().Nodes().Get(t.Context(), testNode, metav1.GetOptions{}); err != nil {
		t.Errorf("READY=1 before the node is registered: %v", err)
	}
	if got := readDatagram(t, conn, 10*time.Second); got != "WATCHDOG=1" {
		t.Errorf("then %q, want WATCHDOG=1", got)
	}
}
