package pleg

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// relistRequestCapacity bounds the on-demand relists waiting; more are
// dropped (logged), and the periodic relist covers those pods.
const relistRequestCapacity = 200

// relistRequest asks for one pod to be relisted now.
type relistRequest struct {
	uid             types.UID
	name, namespace string
	at              time.Time
}

// RequestRelist asks for the pod to be relisted at once, rather than at the
// next periodic relist: its status is read into the cache and its events
// are sent, as upstream's on-demand relist (PLEGOnDemandRelist, GA in
// v1.37), which kubelet asks for after a sync that changed the pod. A
// request the periodic relist has served meanwhile is skipped. It never
// blocks.
func (g *Generic) RequestRelist(ctx context.Context, uid types.UID, name, namespace string) {
	select {
	case g.requests <- relistRequest{uid: uid, name: name, namespace: namespace, at: g.opts.Clock.Now()}:
	default:
		klog.FromContext(ctx).Error(nil, "Relist request channel full; dropping relist request", "podUID", uid)
	}
}

// serveRequests relists the requested pods until ctx ends.
func (g *Generic) serveRequests(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-g.requests:
			g.relistPod(ctx, req)
		}
	}
}

// relistPod reads one pod's status into the cache, makes the record the
// next relist compares against from it, and sends the pod's events. A
// failure is logged and left to the periodic relist.
func (g *Generic) relistPod(ctx context.Context, req relistRequest) {
	g.relistMu.Lock()
	defer g.relistMu.Unlock()
	g.healthMu.Lock()
	served := !g.lastRelist.Before(req.at)
	g.healthMu.Unlock()
	if served {
		return
	}
	logger := klog.FromContext(ctx)
	t := g.opts.Clock.Now()
	st, err := g.rt.GetPodStatus(ctx, req.uid, req.name, req.namespace)
	if err != nil {
		logger.Error(err, "PLEG: unable to relist the pod on demand", "podUID", req.uid)
		return
	}
	old := g.old[req.uid]
	if !hasReadySandbox(st) {
		if prev, _ := g.cache.Get(req.uid); prev != nil && len(prev.IPs) > 0 {
			st.IPs = prev.IPs
		}
	}
	g.cache.Set(req.uid, st, nil, t)
	cur := podRecord(st, g.sandboxIDType(old, st))
	if cur == nil {
		delete(g.old, req.uid)
	} else {
		g.old[req.uid] = cur
	}
	delete(g.reinspect, req.uid)
	for _, ev := range podEvents(req.uid, old, cur) {
		if ev.Type != ContainerChanged {
			g.send(ctx, ev)
		}
	}
}

// podRecord is the listing record of a pod built from its status (the
// IDs and states a relist compares); nil for a pod the runtime no longer
// has.
func podRecord(st *nodekit.PodStatus, sandboxType string) *nodekit.Pod {
	if st == nil || (len(st.Sandboxes) == 0 && len(st.Containers) == 0) {
		return nil
	}
	p := &nodekit.Pod{ID: st.ID, Name: st.Name, Namespace: st.Namespace}
	for _, sb := range st.Sandboxes {
		state := nodekit.StateExited
		if sb.State == nodekit.SandboxReady {
			state = nodekit.StateRunning
		}
		p.Sandboxes = append(p.Sandboxes, &nodekit.Container{ID: nodekit.ContainerID{Type: sandboxType, ID: sb.ID}, State: state, CreatedAt: sb.CreatedAt})
	}
	for _, c := range st.Containers {
		p.Containers = append(p.Containers, &nodekit.Container{ID: c.ID, Name: c.Name, State: c.State, CreatedAt: c.CreatedAt})
	}
	return p
}

// sandboxIDType is the type of the runtime's IDs, for sandboxes, whose
// status carries only the bare ID: as the pod's earlier record or its
// containers have it, else any record's.
func (g *Generic) sandboxIDType(old *nodekit.Pod, st *nodekit.PodStatus) string {
	if old != nil && len(old.Sandboxes) > 0 {
		return old.Sandboxes[0].ID.Type
	}
	for _, c := range st.Containers {
		return c.ID.Type
	}
	for _, p := range g.old {
		for _, sb := range p.Sandboxes {
			return sb.ID.Type
		}
	}
	return ""
}
