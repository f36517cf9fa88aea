package probes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// attempts is how many times a probe whose handler could not run at all
// (outUnknown) is tried before the round is given up, as upstream.
const attempts = 3

// prober runs the handler of one probe and records its events.
type prober struct {
	exec      Execer
	dialer    Dialer
	transport http.RoundTripper
	events    EventRecorder
}

// probe runs spec once against the container and returns its result before
// thresholds. An error means the handler could not run (after retries):
// the round counts for nothing.
func (p *prober) probe(ctx context.Context, kind Kind, pod *v1.Pod, c *v1.Container, spec *v1.Probe, st *v1.PodStatus, id nodekit.ContainerID) (Result, error) {
	logger := klog.FromContext(ctx).WithValues("probeType", kind, "pod", klog.KObj(pod), "containerName", c.Name)
	var (
		out outcome
		msg string
		err error
	)
	for range attempts {
		out, msg, err = p.run(ctx, spec, c, podIP(st), id)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		// The worker was stopped mid-probe: whatever came back is moot.
		return Unknown, ctx.Err()
	}
	ref := containerRef(pod, c)
	switch {
	case err != nil:
		logger.V(1).Info("Probe errored", "err", err)
		p.events.Eventf(ref, v1.EventTypeWarning, ReasonUnhealthy, "%s probe errored and resulted in %s state: %s", kindTitle(kind), out, err)
		return Failure, err
	case out == outSuccess:
		logger.V(3).Info("Probe succeeded")
		return Success, nil
	case out == outWarning:
		logger.V(3).Info("Probe succeeded with a warning", "output", msg)
		p.events.Eventf(ref, v1.EventTypeWarning, ReasonProbeWarning, "%s probe warning: %s", kindTitle(kind), msg)
		return Success, nil
	default:
		logger.V(1).Info("Probe failed", "output", msg)
		p.events.Eventf(ref, v1.EventTypeWarning, ReasonUnhealthy, "%s probe failed: %s", kindTitle(kind), msg)
		return Failure, nil
	}
}

// run runs the probe's handler once.
func (p *prober) run(ctx context.Context, spec *v1.Probe, c *v1.Container, ip string, id nodekit.ContainerID) (outcome, string, error) {
	timeout := time.Duration(spec.TimeoutSeconds) * time.Second
	switch {
	case spec.Exec != nil:
		return checkExec(ctx, p.exec, id, expandStatic(spec.Exec.Command, c.Env), timeout)
	case spec.HTTPGet != nil:
		req, err := newHTTPRequest(ctx, spec.HTTPGet, c, ip, probeUserAgent)
		if err != nil {
			return outUnknown, "", err
		}
		out, msg := checkHTTP(p.transport, req, timeout)
		return out, msg, nil
	case spec.TCPSocket != nil:
		port, err := resolvePort(spec.TCPSocket.Port, c)
		if err != nil {
			return outUnknown, "", err
		}
		host := spec.TCPSocket.Host
		if host == "" {
			host = ip
		}
		out, msg := checkTCP(ctx, p.dialer, net.JoinHostPort(host, strconv.Itoa(port)), timeout)
		return out, msg, nil
	case spec.GRPC != nil:
		service := ""
		if spec.GRPC.Service != nil {
			service = *spec.GRPC.Service
		}
		out, msg := checkGRPC(ctx, p.dialer, net.JoinHostPort(ip, strconv.Itoa(int(spec.GRPC.Port))), service, timeout)
		return out, msg, nil
	}
	return outUnknown, "", errors.New("the probe has no handler (exec, httpGet, tcpSocket or grpc)")
}

// podIP is the pod's primary IP in its status.
func podIP(st *v1.PodStatus) string {
	if st.PodIP != "" {
		return st.PodIP
	}
	if len(st.PodIPs) > 0 {
		return st.PodIPs[0].IP
	}
	return ""
}

// containerRef is the object events about a container are recorded on: the
// pod, with the container's field path, as upstream.
func containerRef(pod *v1.Pod, c *v1.Container) runtime.Object {
	return &v1.ObjectReference{
		Kind: "Pod", APIVersion: "v1",
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		FieldPath: fieldPath(pod, c.Name),
	}
}

func fieldPath(pod *v1.Pod, name string) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return fmt.Sprintf("spec.containers{%s}", name)
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return fmt.Sprintf("spec.initContainers{%s}", name)
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return fmt.Sprintf("spec.ephemeralContainers{%s}", name)
		}
	}
	return "implicitly required container " + name
}

type discardEvents struct{}

func (discardEvents) Eventf(runtime.Object, string, string, string, ...interface{}) {}
