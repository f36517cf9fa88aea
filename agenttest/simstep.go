package agenttest

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// Step runs one round of a stepped node (SimOptions.Clock) at the clock's
// current time, on the caller's goroutine: the PLEG relists, the loop
// drains (pod updates, PLEG events, probe wakes and the resizer's retries
// of deferred resizes, due syncs and every pod worker step, inline), the
// status manager publishes, housekeeping runs, and the loop drains and the
// status manager publishes once more (the removals the sink's deletes
// send, the orphans housekeeping kills). It
// returns the loop's error: the runtime's health error while the runtime
// is unavailable (nothing was synced), or ctx's.
func (n *SimNode) Step(ctx context.Context) error {
	if n.clock == nil {
		return errors.New("agenttest: Step needs a stepped SimNode (SimOptions.Clock)")
	}
	n.pleg.Relist(ctx)
	n.forwardRetries()
	if err := n.loop.Drain(ctx); err != nil {
		return err
	}
	if err := n.status.SyncOnce(ctx); err != nil {
		return err
	}
	n.loop.Housekeeping(ctx)
	n.forwardRetries()
	if err := n.loop.Drain(ctx); err != nil {
		return err
	}
	return n.status.SyncOnce(ctx)
}

// Advance moves a stepped node's clock on by d, one PLEG period (1 s) at
// a time, with a Step after each move, as a running node would relist and
// sync. It returns the last Step's error (earlier ones, such as an
// unavailable runtime's, do not stop time).
func (n *SimNode) Advance(ctx context.Context, d time.Duration) error {
	if n.clock == nil {
		return errors.New("agenttest: Advance needs a stepped SimNode (SimOptions.Clock)")
	}
	var err error
	for d > 0 {
		inc := min(d, time.Second)
		n.clock.Step(inc)
		d -= inc
		if err = n.Step(ctx); ctx.Err() != nil {
			return err
		}
	}
	return err
}

// Now is the node's clock's time.
func (n *SimNode) Now() time.Time {
	if n.clock == nil {
		return time.Now() //nolint:forbidigo // a running SimNode is on real (or synctest) time
	}
	return n.clock.Now()
}

// AddStaticPod sends the pods as new static pods (ADD from the "file"
// source), as a manifest directory would: each copy is annotated with
// its source and, unless set, a config hash (its UID).
func (n *SimNode) AddStaticPod(pods ...*v1.Pod) { n.sendStatic(nodekit.ADD, pods) }

// RemoveStaticPod sends the static pods as gone (REMOVE from the "file"
// source), as when their manifests are deleted.
func (n *SimNode) RemoveStaticPod(pods ...*v1.Pod) { n.sendStatic(nodekit.REMOVE, pods) }

func (n *SimNode) sendStatic(op nodekit.Op, pods []*v1.Pod) {
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		p = p.DeepCopy()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[annotationSource] = nodekit.SourceFile
		if p.Annotations[annotationHash] == "" {
			p.Annotations[annotationHash] = string(p.UID)
		}
		out = append(out, p)
	}
	select {
	case n.updates <- nodekit.PodUpdate{Op: op, Pods: out, Source: nodekit.SourceFile}:
	case <-n.done:
	}
}

// Mirror returns the mirror pod of the static pod with that name and
// namespace, as the simulated API server holds it.
func (n *SimNode) Mirror(name, namespace string) (*v1.Pod, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m, ok := n.mirrors[name+"_"+namespace]
	return m, ok
}

const (
	annotationSource = podutil.ConfigSourceAnnotation
	annotationHash   = podutil.ConfigHashAnnotation
	annotationMirror = podutil.ConfigMirrorAnnotation
)

// simMirrors is the simulated API server's side of mirror pods: a mirror
// created or deleted is sent back to the loop from the "api" source, as
// the API server's watch would.
type simMirrors struct{ n *SimNode }

func (s simMirrors) CreateMirrorPod(_ context.Context, static *v1.Pod) error {
	m := static.DeepCopy()
	m.UID = "mirror-" + static.UID
	m.Annotations[annotationMirror] = static.Annotations[annotationHash]
	m.Annotations[annotationSource] = nodekit.SourceAPI
	m.Status = v1.PodStatus{}
	s.n.mu.Lock()
	s.n.mirrors[podutil.FullName(static)] = m
	held := s.n.holdMirrors
	if held {
		s.n.heldMirrors = append(s.n.heldMirrors, m)
	}
	s.n.mu.Unlock()
	if !held {
		s.n.send(nodekit.ADD, []*v1.Pod{m})
	}
	return nil
}

// HoldMirrors delays the simulated API server's watch of mirror pods:
// while held, a mirror pod the loop creates exists (Mirror finds it) but
// is not sent back to the loop, so the node does not know it yet. Releasing
// sends every held mirror pod.
func (n *SimNode) HoldMirrors(hold bool) {
	n.mu.Lock()
	n.holdMirrors = hold
	var out []*v1.Pod
	if !hold {
		out, n.heldMirrors = n.heldMirrors, nil
	}
	n.mu.Unlock()
	if len(out) > 0 {
		n.send(nodekit.ADD, out)
	}
}

func (s simMirrors) DeleteMirrorPod(_ context.Context, fullName string, uid *types.UID) (bool, error) {
	s.n.mu.Lock()
	m, ok := s.n.mirrors[fullName]
	if !ok || uid != nil && m.UID != *uid {
		s.n.mu.Unlock()
		return false, nil
	}
	delete(s.n.mirrors, fullName)
	s.n.mu.Unlock()
	s.n.send(nodekit.REMOVE, []*v1.Pod{m})
	return true, nil
}
