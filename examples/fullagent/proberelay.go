package main

import (
	"context"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/probes"
	"github.com/nodekit/nodekit/statusmgr"
)

// probeRelay passes probe result changes to the loop (which resyncs the
// pod) and, at once, readiness and startup into the status manager, as
// upstream's prober does: a pod whose worker is busy terminating it (a
// long grace period) still turns not ready as soon as its readiness
// probe fails.
type probeRelay struct {
	probes *probes.Manager
	status *statusmgr.Manager
	pods   func(types.UID) (*v1.Pod, bool)
	out    chan types.UID
	// resizes are pods whose deferred resize may fit now
	// (allocation.Manager.Retries); relayed as they are. Nil: none.
	resizes <-chan types.UID
	// devHealth and claimHealth are pods whose devices' health changed
	// (devicemgr's and dra's HealthUpdates); relayed as they are.
	devHealth, claimHealth <-chan types.UID
}

func newProbeRelay(p *probes.Manager, st *statusmgr.Manager, pods func(types.UID) (*v1.Pod, bool)) *probeRelay {
	return &probeRelay{probes: p, status: st, pods: pods, out: make(chan types.UID, 100)}
}

// Updates is the loop's ProbeUpdates.
func (r *probeRelay) Updates() <-chan types.UID { return r.out }

// Run relays until ctx is done.
func (r *probeRelay) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case uid := <-r.probes.Updates():
			r.apply(uid)
			select {
			case r.out <- uid:
			case <-ctx.Done():
				return ctx.Err()
			}
		case uid := <-r.resizes:
			if err := r.relay(ctx, uid); err != nil {
				return err
			}
		case uid := <-r.devHealth:
			if err := r.relay(ctx, uid); err != nil {
				return err
			}
		case uid := <-r.claimHealth:
			if err := r.relay(ctx, uid); err != nil {
				return err
			}
		}
	}
}

// relay passes uid to the loop.
func (r *probeRelay) relay(ctx context.Context, uid types.UID) error {
	select {
	case r.out <- uid:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// apply records the pod's current readiness and startup results.
func (r *probeRelay) apply(uid types.UID) {
	pod, ok := r.pods(uid)
	if !ok {
		return
	}
	st, ok := r.status.GetPodStatus(uid)
	if !ok {
		return
	}
	specs := map[string]*v1.Container{}
	for i := range pod.Spec.InitContainers {
		specs[pod.Spec.InitContainers[i].Name] = &pod.Spec.InitContainers[i]
	}
	for i := range pod.Spec.Containers {
		specs[pod.Spec.Containers[i].Name] = &pod.Spec.Containers[i]
	}
	for _, cs := range append(append([]v1.ContainerStatus{}, st.InitContainerStatuses...), st.ContainerStatuses...) {
		c := specs[cs.Name]
		if c == nil || cs.State.Running == nil || cs.ContainerID == "" {
			continue
		}
		typ, id, _ := strings.Cut(cs.ContainerID, "://")
		cid := nodekit.ContainerID{Type: typ, ID: id}
		if c.StartupProbe != nil {
			res, _ := r.probes.Result(probes.Startup, cid)
			_ = r.status.SetContainerStartup(uid, cid, res == probes.Success)
		}
		if c.ReadinessProbe != nil {
			started := c.StartupProbe == nil
			if !started {
				res, _ := r.probes.Result(probes.Startup, cid)
				started = res == probes.Success
			}
			res, _ := r.probes.Result(probes.Readiness, cid)
			// A result not in yet leaves the status as it is.
			if res != probes.Unknown || !started {
				_ = r.status.SetContainerReadiness(uid, cid, started && res == probes.Success)
			}
		}
	}
}
