package sdnotify_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/nodekit/nodekit/sdnotify"
)

// An agent started by systemd finds the notify socket in its environment
// and says it is ready; here the test plays systemd.
func Example() {
	dir, _ := os.MkdirTemp("", "sdnotify")
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "notify")
	systemd, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer systemd.Close()

	env := map[string]string{"NOTIFY_SOCKET": socket, "WATCHDOG_USEC": "30000000"}
	getenv := func(k string) string { return env[k] }
	n := sdnotify.FromEnv(getenv)
	timeout, _ := sdnotify.WatchdogTimeout(getenv, os.Getpid())
	w, _ := sdnotify.NewWatchdog(sdnotify.WatchdogConfig{Notifier: n, Timeout: timeout})
	sent, err := n.Notify(context.Background(), sdnotify.Ready)
	fmt.Println("sent:", sent, err)
	fmt.Println("watchdog every", w.Interval())

	buf := make([]byte, 64)
	k, _ := systemd.Read(buf)
	fmt.Println("systemd got:", string(buf[:k]))
	// Output:
	// sent: true <nil>
	// watchdog every 15s
	// systemd got: READY=1
}
