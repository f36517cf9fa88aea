package probes

import (
	"context"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// Kind names a probe: the root contract's nodekit.ProbeKind, which the
// sync loop reads results under too.
type Kind = nodekit.ProbeKind

// The probe kinds (nodekit's).
const (
	Liveness  = nodekit.ProbeLiveness
	Readiness = nodekit.ProbeReadiness
	Startup   = nodekit.ProbeStartup
)

// kindTitle is the kind as upstream writes it at the start of an event
// message.
func kindTitle(k Kind) string {
	switch k {
	case Liveness:
		return "Liveness"
	case Readiness:
		return "Readiness"
	case Startup:
		return "Startup"
	}
	return string(k)
}

// kindSpec returns the container's probe of this kind, or nil.
func kindSpec(k Kind, c *v1.Container) *v1.Probe {
	switch k {
	case Liveness:
		return c.LivenessProbe
	case Readiness:
		return c.ReadinessProbe
	case Startup:
		return c.StartupProbe
	}
	return nil
}

// Result is the last reported result of a probe: the root contract's
// nodekit.ProbeResult (Unknown 0, Success 1, Failure 2).
type Result = nodekit.ProbeResult

// Probe results (nodekit's).
const (
	Unknown = nodekit.ProbeUnknown
	Success = nodekit.ProbeSuccess
	Failure = nodekit.ProbeFailure
)

// Execer runs a command in a running container; *criruntime.Runtime
// implements it. A non-zero exit is reported through exitCode, not err. A
// command still running after timeout must end with an error for which
// errors.Is(err, context.DeadlineExceeded) holds, or one with a Timeout()
// method reporting true (cri-client's "command timed out" error, which
// criruntime wraps, is recognized too). A zero timeout means none.
type Execer interface {
	ExecSync(ctx context.Context, id nodekit.ContainerID, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int, err error)
}

// ExecerFunc adapts a function to Execer.
type ExecerFunc func(ctx context.Context, id nodekit.ContainerID, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int, err error)

// ExecSync calls f.
func (f ExecerFunc) ExecSync(ctx context.Context, id nodekit.ContainerID, cmd []string, timeout time.Duration) ([]byte, []byte, int, error) {
	return f(ctx, id, cmd, timeout)
}

// StatusGetter gives the newest API status the agent computed for a pod: the
// probe workers read each container's ID, state and start time, and the pod
// IP, from it. statusmgr.Manager implements it. It must not block.
type StatusGetter interface {
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
}

// StatusGetterFunc adapts a function to StatusGetter.
type StatusGetterFunc func(uid types.UID) (v1.PodStatus, bool)

// GetPodStatus calls f.
func (f StatusGetterFunc) GetPodStatus(uid types.UID) (v1.PodStatus, bool) { return f(uid) }

// EventRecorder records events; client-go's record.EventRecorder fits.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// Dialer opens the connections of httpGet, tcpSocket and grpc probes and of
// httpGet hooks; *net.Dialer fits. Tests may route them anywhere.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Event reasons, as upstream.
const (
	// ReasonUnhealthy is recorded on a container for every failed probe.
	ReasonUnhealthy = "Unhealthy"
	// ReasonProbeWarning is recorded when an httpGet probe succeeded on a
	// redirect it did not follow (to another host).
	ReasonProbeWarning = "ProbeWarning"
	// ReasonLifecycleHTTPFallback is recorded on a pod when an HTTPS hook
	// had to be retried over plain HTTP.
	ReasonLifecycleHTTPFallback = "LifecycleHTTPFallback"
)

// TerminationGracePeriod returns the grace period for killing container c
// because its probe of the given kind failed, as upstream: the probe's
// terminationGracePeriodSeconds when set (liveness and startup only), unless
// the pod is being deleted, whose deletion grace period then applies. Nil
// means "the pod's usual grace period": the sync loop puts the result in
// nodekit.KillInfo.GracePeriod of a liveness or startup kill. It is a pure
// function of the spec.
func TerminationGracePeriod(pod *v1.Pod, c *v1.Container, kind Kind) *time.Duration {
	if pod == nil || c == nil || pod.DeletionGracePeriodSeconds != nil {
		return nil
	}
	if kind != Liveness && kind != Startup {
		return nil
	}
	p := kindSpec(kind, c)
	if p == nil || p.TerminationGracePeriodSeconds == nil {
		return nil
	}
	d := time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
	return &d
}

// metricLabel is the result label of prober_probe_total, as upstream.
func metricLabel(r Result) string {
	switch r {
	case Success:
		return "successful"
	case Failure:
		return "failed"
	}
	return "unknown"
}
