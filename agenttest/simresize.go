package agenttest

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/allocation"
	"github.com/nodekit/nodekit/syncloop"
)

// defaultSimAllocatable is a SimNode's allocatable when
// SimOptions.Allocatable is unset.
func defaultSimAllocatable() v1.ResourceList {
	return v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("4"),
		v1.ResourceMemory: resource.MustParse("8Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
}

// newResizer builds the in-place resize a SimNode runs with
// SimOptions.InPlaceResize, as fullagent's: package allocation's Manager,
// allocations in memory, a resize fitted by admission's ResourceFit
// against the node's allocatable beside its other active pods (read from
// the pod store, built before), applied by the fake runtime, its events
// recorded by the node.
func (n *SimNode) newResizer(opts SimOptions, clk clock.PassiveClock) (syncloop.Resizer, error) {
	if !opts.InPlaceResize {
		return nil, nil
	}
	alloc := opts.Allocatable
	if alloc == nil {
		alloc = defaultSimAllocatable()
	}
	node := &v1.Node{}
	node.Name = "simnode"
	node.Labels = map[string]string{v1.LabelOSStable: "linux"}
	node.Status.Capacity, node.Status.Allocatable = alloc.DeepCopy(), alloc.DeepCopy()
	m, err := allocation.New(allocation.Config{
		Fit:        admission.NewResourceFit(admission.NodeFunc(func(context.Context) (*v1.Node, error) { return node.DeepCopy(), nil })),
		Pods:       n.store.ActivePods,
		Containers: n.rt,
		Recorder:   simEvents{n},
		Clock:      clk,
	})
	if err != nil {
		return nil, err
	}
	n.retries = m.Retries()
	return m, nil
}

// forwardRetries hands the resizer's retries of deferred resizes to the
// loop as pod wakes, without blocking (a stepped node calls it before
// each drain).
func (n *SimNode) forwardRetries() {
	for {
		select {
		case uid := <-n.retries:
			select {
			case n.probeWake <- uid:
			default:
				return // the loop's periodic sync decides it again
			}
		default:
			return
		}
	}
}

// runRetries forwards the resizer's retries until ctx is done.
func (n *SimNode) runRetries(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case uid := <-n.retries:
			select {
			case n.probeWake <- uid:
			case <-ctx.Done():
				return
			}
		}
	}
}

// simEvents records the events the loop and the resizer record on pods.
type simEvents struct{ n *SimNode }

func (e simEvents) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	obj, err := meta.Accessor(object)
	if err != nil {
		return
	}
	line := fmt.Sprintf("%s %s: %s", eventtype, reason, fmt.Sprintf(messageFmt, args...))
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	e.n.events[obj.GetUID()] = append(e.n.events[obj.GetUID()], line)
}

// Events returns the events recorded on the pod, oldest first, one line
// each: "TYPE REASON: MESSAGE". The slice is the caller's.
func (n *SimNode) Events(uid types.UID) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.events[uid]...)
}

var _ syncloop.EventRecorder = simEvents{}
