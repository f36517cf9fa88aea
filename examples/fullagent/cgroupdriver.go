package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"
)

// cgroupDriverSource is the runtime call cgroupDriverFromRuntime needs;
// criruntime.Runtime has it. "" with no error: the runtime does not say.
type cgroupDriverSource interface {
	CgroupDriver(ctx context.Context) (string, error)
}

// cgroupDriverAttempts and cgroupDriverRetry are upstream's: three tries,
// two seconds apart, for a runtime that is still starting.
const (
	cgroupDriverAttempts = 3
	cgroupDriverRetry    = 2 * time.Second
)

// cgroupDriverFromRuntime is upstream's KubeletCgroupDriverFromCRI (GA
// since v1.34): the driver the runtime reports (CRI RuntimeConfig, which
// containerd 2 answers) replaces the configured cgroupDriver, and the log
// says so; a runtime that does not say (containerd 1.6 answers
// Unimplemented) leaves the configured one. Other errors are retried
// cgroupDriverAttempts times, retry apart, and then fail the start, as
// upstream's getCgroupDriverFromCRI does.
func cgroupDriverFromRuntime(ctx context.Context, rt cgroupDriverSource, configured string, retry time.Duration) (string, error) {
	logger := klog.FromContext(ctx)
	var err error
	for i := range cgroupDriverAttempts {
		if i > 0 {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(retry):
			}
		}
		var d string
		if d, err = rt.CgroupDriver(ctx); err != nil {
			continue
		}
		if d == "" {
			logger.Info("The container runtime does not report its cgroup driver (CRI RuntimeConfig); using cgroupDriver from the configuration", "cgroupDriver", configured)
			return configured, nil
		}
		logger.Info("Using the cgroup driver the container runtime reports (CRI RuntimeConfig)", "cgroupDriver", d, "configured", configured)
		return d, nil
	}
	return "", fmt.Errorf("cgroupDriver: asking the container runtime for its cgroup driver: %w", err)
}
