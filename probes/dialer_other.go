//go:build !unix

package probes

import "net"

// defaultDialer is the dialer of probes and hooks.
func defaultDialer() *net.Dialer { return &net.Dialer{} }
