package probes

import (
	"context"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// ResultSource is what a Relay reads: the last results, and the UIDs of
// pods whose results changed. *Manager is one.
type ResultSource interface {
	Result(kind Kind, id nodekit.ContainerID) (Result, bool)
	Updates() <-chan types.UID
}

// StatusWriter is where a Relay writes readiness and startup results: the
// pod's newest status and the two setters (statusmgr.Manager).
type StatusWriter interface {
	StatusGetter
	SetContainerReadiness(podUID types.UID, id nodekit.ContainerID, ready bool) error
	SetContainerStartup(podUID types.UID, id nodekit.ContainerID, started bool) error
}

// PodGetter finds a pod the agent runs by UID (syncloop.PodStore).
type PodGetter interface {
	GetPodByUID(uid types.UID) (*v1.Pod, bool)
}

// Relay passes probe result changes to the sync loop (which resyncs the
// pod, its Config.ProbeUpdates) and, at once, readiness and startup into
// the pod's status, as upstream's prober does: a pod whose worker is busy
// (terminating for a long grace period) still turns not ready as soon as
// its readiness probe fails. Other wake-ups for the loop's pod workers
// (a deferred resize that may fit, a device's health) can be relayed
// beside them.
type Relay struct {
	results ResultSource
	status  StatusWriter
	pods    PodGetter
	also    []<-chan types.UID
	out     chan types.UID
}

// NewRelay returns a relay of results to status and pods' UIDs to
// Updates; the UIDs from each of also are relayed as they are.
func NewRelay(results ResultSource, status StatusWriter, pods PodGetter, also ...<-chan types.UID) *Relay {
	return &Relay{results: results, status: status, pods: pods, also: also, out: make(chan types.UID, 100)}
}

// Updates is the loop's ProbeUpdates.
func (r *Relay) Updates() <-chan types.UID { return r.out }

// Run relays until ctx is done, then returns ctx.Err() once every
// forwarder has stopped.
func (r *Relay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, ch := range r.also {
		if ch == nil {
			continue
		}
		wg.Go(func() { r.forward(ctx, ch) })
	}
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case uid := <-r.results.Updates():
			r.Apply(uid)
			select {
			case r.out <- uid:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// forward relays ch's UIDs until ctx is done.
func (r *Relay) forward(ctx context.Context, ch <-chan types.UID) {
	for {
		select {
		case <-ctx.Done():
			return
		case uid := <-ch:
			select {
			case r.out <- uid:
			case <-ctx.Done():
				return
			}
		}
	}
}

// Apply records the pod's current readiness and startup results in its
// status: each running container with a startup probe is started once it
// succeeded; one with a readiness probe is ready when started and its
// readiness succeeded, and is left as it is while that result is not in.
func (r *Relay) Apply(uid types.UID) {
	pod, ok := r.pods.GetPodByUID(uid)
	if !ok {
		return
	}
	st, ok := r.status.GetPodStatus(uid)
	if !ok {
		return
	}
	specs := map[string]*v1.Container{}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			specs[list[i].Name] = &list[i]
		}
	}
	for _, cs := range append(append([]v1.ContainerStatus{}, st.InitContainerStatuses...), st.ContainerStatuses...) {
		c := specs[cs.Name]
		if c == nil || cs.State.Running == nil || cs.ContainerID == "" {
			continue
		}
		typ, id, _ := strings.Cut(cs.ContainerID, "://")
		r.applyContainer(uid, c, nodekit.ContainerID{Type: typ, ID: id})
	}
}

// applyContainer records one running container's results.
func (r *Relay) applyContainer(uid types.UID, c *v1.Container, id nodekit.ContainerID) {
	started := c.StartupProbe == nil
	if c.StartupProbe != nil {
		res, _ := r.results.Result(Startup, id)
		started = res == Success
		_ = r.status.SetContainerStartup(uid, id, started)
	}
	if c.ReadinessProbe == nil {
		return
	}
	res, _ := r.results.Result(Readiness, id)
	// A result not in yet leaves the status as it is.
	if res != Unknown || !started {
		_ = r.status.SetContainerReadiness(uid, id, started && res == Success)
	}
}
