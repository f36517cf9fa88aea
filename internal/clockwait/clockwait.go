// Package clockwait waits on an injected clock, so that code timed by a
// k8s.io/utils/clock.Clock can be stepped by a fake one in tests.
package clockwait

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Sleep waits d on clk and reports true, or false if ctx ended first.
// Its timer is stopped on return, so a fake clock keeps no waiter of it.
func Sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
