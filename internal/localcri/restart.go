package localcri

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"
)

// Restart stops containerd and starts it again with the same config, dirs
// and socket, as a containerd upgrade does: containerd alone gets SIGTERM
// (SIGKILL after a timeout), so its shims and the containers under them
// keep running, and the new containerd reconnects to them. The pods, their
// network and the images stay. It returns once the CRI answers Version and
// Status again (bounded by ctx and by two minutes). Restarting a stopped
// instance is an error.
func (c *Containerd) Restart(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("restart containerd: the instance was stopped")
	}
	bins, err := lookupBinaries(c.st.Version, c.st.BinDir)
	if err != nil {
		return fmt.Errorf("restart containerd: %w", err)
	}
	l := newLayout(c.st.Dir)
	t0 := time.Now()
	if processMatches(c.st.PID, c.st.Config) {
		if err := c.terminate(ctx); err != nil {
			return fmt.Errorf("restart containerd: %w", err)
		}
	}
	logger.V(1).Info("containerd stopped; its shims keep running", "pid", c.st.PID, "duration", time.Since(t0))
	if _, err := c.launch(ctx, l, bins); err != nil {
		return fmt.Errorf("restart containerd: %w", err)
	}
	logger.V(1).Info("containerd is ready again", "pid", c.st.PID, "duration", time.Since(t0))
	return nil
}

// PID returns the pid of the running containerd.
func (c *Containerd) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.PID
}

// RemovePods stops and removes every pod sandbox of the instance, and so
// all its containers, through the CRI (as a host reboot leaves nothing
// running). containerd keeps running.
func (c *Containerd) RemovePods(ctx context.Context) error {
	if err := cleanupPods(ctx, c.Socket); err != nil {
		return fmt.Errorf("remove pods of containerd in %s: %w", c.Dir, err)
	}
	return nil
}
