package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Messages systemd understands (sd_notify(3)).
const (
	Ready     = "READY=1"
	Stopping  = "STOPPING=1"
	KeepAlive = "WATCHDOG=1"
)

// Environment variables systemd sets for a notify service.
const (
	SocketEnv      = "NOTIFY_SOCKET"
	WatchdogUSEnv  = "WATCHDOG_USEC"
	WatchdogPIDEnv = "WATCHDOG_PID"
)

// Notifier sends sd_notify messages to one socket. The zero Notifier
// (and a nil one) has no socket and sends nothing.
type Notifier struct {
	socket string
}

// New is a Notifier for the unix datagram socket at socket; a leading
// "@" names an abstract socket, as in $NOTIFY_SOCKET.
func New(socket string) *Notifier { return &Notifier{socket: socket} }

// FromEnv is a Notifier for $NOTIFY_SOCKET as getenv reads it.
func FromEnv(getenv func(string) string) *Notifier { return New(getenv(SocketEnv)) }

// Enabled reports whether n has a socket to send to.
func (n *Notifier) Enabled() bool { return n != nil && n.socket != "" }

// Notify sends state (one or more "KEY=VALUE" lines) in one datagram. It
// reports false and no error when n has no socket; it blocks at most
// until ctx's deadline (or a second) for a full socket buffer.
func (n *Notifier) Notify(ctx context.Context, state string) (bool, error) {
	if !n.Enabled() {
		return false, nil
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unixgram", n.socket)
	if err != nil {
		return false, fmt.Errorf("sdnotify: %s %s: %w", SocketEnv, n.socket, err)
	}
	defer conn.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Second) //nolint:forbidigo // a socket deadline is wall-clock time
	}
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sdnotify: send %q to %s: %w", state, n.socket, err)
	}
	return true, nil
}

// WatchdogTimeout is the watchdog timeout systemd set for the process
// with pid: $WATCHDOG_USEC, when $WATCHDOG_PID is unset or pid. It is 0
// when the watchdog is off (or meant for another process), and an error
// names a variable that does not parse.
func WatchdogTimeout(getenv func(string) string, pid int) (time.Duration, error) {
	us := getenv(WatchdogUSEnv)
	if us == "" {
		return 0, nil
	}
	if p := getenv(WatchdogPIDEnv); p != "" {
		wp, err := strconv.Atoi(p)
		if err != nil {
			return 0, fmt.Errorf("sdnotify: %s %q: %w", WatchdogPIDEnv, p, err)
		}
		if wp != pid {
			return 0, nil
		}
	}
	v, err := strconv.ParseInt(us, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sdnotify: %s %q: %w", WatchdogUSEnv, us, err)
	}
	if v <= 0 {
		return 0, errors.New("sdnotify: " + WatchdogUSEnv + " must be positive, is " + us)
	}
	return time.Duration(v) * time.Microsecond, nil
}
