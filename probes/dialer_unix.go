//go:build unix

package probes

import (
	"net"
	"syscall"
)

// defaultDialer is the dialer of probes and hooks. It sets SO_LINGER to one
// second, as upstream, so that the many short probe connections do not sit
// in TIME-WAIT for a minute each; zero would reset connections instead of
// closing them.
func defaultDialer() *net.Dialer {
	return &net.Dialer{
		Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				// Best effort: a probe is better sent without it than not.
				_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
			})
		},
	}
}
