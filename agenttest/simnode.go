package agenttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
)

// SimOptions configures a SimNode. The zero value is a usable node.
type SimOptions struct {
	// Admitters run in order on every new pod, as in an agent (for example
	// admission.Builtins followed by a custom policy).
	Admitters []nodekit.Admitter
	// Sink, when set, also receives every status the node publishes and
	// every final delete, after the SimNode has recorded them.
	Sink nodekit.StatusSink
	// NodeIPs are the node's addresses (hostIP); default 192.0.2.10.
	NodeIPs []string
	// RelistPeriod is the PLEG's (default 1 s, as upstream). A short one
	// makes a SimNode outside a synctest bubble react faster.
	RelistPeriod time.Duration
	// EventedPLEG runs the evented PLEG over the fake runtime's container
	// events (pleg.New); by default the node relists only, as kubelet
	// v1.37 with its EventedPLEG gate off. A stepped node relists either
	// way: events are read only by a running PLEG.
	EventedPLEG bool
	// Clock, when set, makes the node stepped: nothing runs on goroutines
	// of its own, the loop's pod workers run inline, and Step and Advance
	// drive every part on the caller's goroutine on this fake clock, so a
	// scenario is deterministic without a synctest bubble. Run refuses a
	// stepped node.
	Clock *testingclock.FakeClock
	// InPlaceResize runs in-place pod resize as fullagent does: package
	// allocation's Manager (allocations in memory) allocates a pod's new
	// resources when they fit beside the other active pods in Allocatable
	// (admission's ResourceFit), or leaves the resize pending (Deferred,
	// retried when a pod leaves), and the fake runtime applies it
	// (FakeRuntime.Resizes); its events are recorded (Events). Off, a
	// change of a running pod's resources is not acted on.
	InPlaceResize bool
	// Allocatable is the node's allocatable for resize decisions
	// (default: 4 CPUs, 8Gi of memory, 110 pods).
	Allocatable v1.ResourceList
	// Runtime, when set, wraps the fake runtime for the loop: the loop
	// calls what it returns (a test's runtime that blocks or counts,
	// embedding the fake), while the PLEG and the health check still see
	// the fake itself.
	Runtime func(*FakeRuntime) nodekit.Runtime
	// SourcesReady, when set, is the loop's view of whether every pod
	// source has been seen (default: always), to hold a node as an agent
	// that has not yet heard from its API server.
	SourcesReady func() bool
	// ContainerHash is the loop's Config.ContainerHash (default none: a
	// changed spec does not replace a running container).
	ContainerHash func(*v1.Container) uint64
	// Loop, when set, has the last say on the loop's Config, for a test of
	// one of the loop's seams the node leaves empty (Metrics,
	// TracerProvider, Volumes, DynamicResources, ResourceHealth, Resizer).
	Loop func(*syncloop.Config)
}

// SimNode is a simulated node: the real syncloop, PLEG (pleg.New: the
// relist one, or with SimOptions.EventedPLEG the evented one) and status
// manager over a FakeRuntime, fed by the pods a test adds, with statuses
// published to an in-memory sink. A test scripts what happens in the runtime
// — a container exits (Runtime().ExitContainer), an image cannot be pulled
// (Runtime().FailImage), the runtime goes away (Runtime().SetUnavailable), a
// probe fails (SetProbe) — and reads back the statuses the agent computed.
//
// Run a SimNode inside a testing/synctest bubble: time is then fake, Settle
// lets a given time pass and waits until every goroutine has reacted, and a
// scenario of minutes (crash-loop back-off) runs deterministically in
// milliseconds:
//
//	synctest.Test(t, func(t *testing.T) {
//		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
//		n.AddPod(pod)
//		n.Settle(2 * time.Second)
//		n.Runtime().ExitContainer(pod.UID, "app", 1)
//		n.Settle(2 * time.Second)
//		st, _ := n.ContainerStatus(pod.UID, "app") // RestartCount 1
//	})
//
// Outside a bubble it runs on real time; use WaitFor instead of Settle.
// Pods the test adds come from the "api" source: their statuses are
// published to the pods themselves. The sink's delete of a finished deleted
// pod is answered, as the API server would, by removing the pod.
//
// Probes are scripted, not run: a container's liveness, readiness and
// startup results are what SetProbe last set for it (none by default, so
// a readiness probe keeps its container unready until set to Success).
// Static pods (SendStatic) get mirror pods: a mirror the loop creates comes
// back to it from the "api" source, as the API server's watch would send it.
// Lifecycle hooks and volumes are not simulated.
type SimNode struct {
	rt        *FakeRuntime
	pleg      pleg.PLEG
	clock     *testingclock.FakeClock // nil unless stepped
	store     *syncloop.PodStore
	status    *statusmgr.Manager
	loop      *syncloop.Loop
	updates   chan nodekit.PodUpdate
	probeWake chan types.UID
	rootDir   string
	forward   nodekit.StatusSink
	retries   <-chan types.UID // the resizer's retries of deferred resizes; nil without

	mu        sync.Mutex
	probes    map[probeKey]syncloop.ProbeResult
	events    map[types.UID][]string
	published map[types.UID][]v1.PodStatus
	deleted   map[types.UID]bool
	mirrors   map[string]*v1.Pod // by full name, as the simulated API server holds them
	// holdMirrors delays sending created mirror pods (heldMirrors) to the loop.
	holdMirrors bool
	heldMirrors []*v1.Pod
	done        chan struct{} // closed when Run starts ending
}

type probeKey struct {
	kind syncloop.ProbeKind
	id   nodekit.ContainerID
}

// NewSimNode builds a simulated node; nothing runs until Run. It creates a
// temporary root directory, which Run removes when it returns.
func NewSimNode(opts SimOptions) (*SimNode, error) {
	if opts.NodeIPs == nil {
		opts.NodeIPs = []string{"192.0.2.10"}
	}
	dir, err := os.MkdirTemp("", "nksim-")
	if err != nil {
		return nil, fmt.Errorf("agenttest: simulated node root: %w", err)
	}
	var clk clock.WithTicker = clock.RealClock{}
	if opts.Clock != nil {
		clk = opts.Clock
	}
	n := &SimNode{
		rt:        NewFakeRuntime(clk),
		clock:     opts.Clock,
		updates:   make(chan nodekit.PodUpdate, 100),
		probeWake: make(chan types.UID, 100),
		rootDir:   dir,
		forward:   opts.Sink,
		probes:    map[probeKey]syncloop.ProbeResult{},
		events:    map[types.UID][]string{},
		published: map[types.UID][]v1.PodStatus{},
		deleted:   map[types.UID]bool{},
		mirrors:   map[string]*v1.Pod{},
		done:      make(chan struct{}),
	}
	cache := pleg.NewCache()
	n.pleg = pleg.New(n.rt, cache, pleg.Options{RelistPeriod: opts.RelistPeriod, Clock: clk, RelistOnly: !opts.EventedPLEG})
	n.store = syncloop.NewPodStore()
	n.status, err = statusmgr.NewManager(statusmgr.Config{Sink: simSink{n}, Pods: n.store, Mirrors: n.store, Clock: clk,
		SharePods: true})
	var resizer syncloop.Resizer
	if err == nil {
		resizer, err = n.newResizer(opts, clk)
	}
	if err == nil {
		var rt nodekit.Runtime = n.rt
		if opts.Runtime != nil {
			rt = opts.Runtime(n.rt)
		}
		cfg := syncloop.Config{
			Runtime: rt, Pods: n.store, SourcesReady: opts.SourcesReady, ContainerHash: opts.ContainerHash, Cache: cache, Status: n.status, Updates: n.updates,
			Events: n.pleg.Events(), Probes: simProbes{n}, ProbeUpdates: n.probeWake,
			Health: func(context.Context) error {
				if err := n.rt.ready(); err != nil {
					return err
				}
				return n.pleg.Healthy()
			},
			Mirror:    simMirrors{n},
			Admitters: opts.Admitters, RootDir: dir, NodeIPs: opts.NodeIPs,
			Clock: clk, InlineWorkers: opts.Clock != nil,
			Resizer: resizer, Recorder: simEvents{n},
		}
		if opts.Loop != nil {
			opts.Loop(&cfg)
		}
		n.loop, err = syncloop.New(cfg)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("agenttest: simulated node: %w", err)
	}
	return n, nil
}

// StartSimNode builds a SimNode and runs it until the test ends; t.Cleanup
// stops it and waits for it. Call it inside the synctest bubble the test
// uses (or outside one, on real time). Errors fail the test.
func StartSimNode(t testing.TB, opts SimOptions) *SimNode {
	t.Helper()
	n, err := NewSimNode(opts)
	if err != nil {
		t.Fatal(err)
	}
	if n.clock != nil {
		t.Cleanup(func() { _ = os.RemoveAll(n.rootDir) })
		return n
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return n
}

// Run runs the node until ctx is done, then waits for its parts to stop,
// removes its root directory and returns ctx.Err(). Containers in the fake
// runtime are left as they are. Run may be called once.
func (n *SimNode) Run(ctx context.Context) error {
	if n.clock != nil {
		return errors.New("agenttest: a stepped SimNode (SimOptions.Clock) does not Run; drive it with Step")
	}
	var wg sync.WaitGroup
	n.pleg.Relist(ctx) // the PLEG is healthy before the loop's first look
	wg.Go(func() { _ = n.pleg.Run(ctx) })
	wg.Go(func() { _ = n.status.Run(ctx) })
	if n.retries != nil {
		wg.Go(func() { n.runRetries(ctx) })
	}
	err := n.loop.Run(ctx)
	close(n.done)
	wg.Wait()
	_ = os.RemoveAll(n.rootDir)
	return err
}

// PodStore returns the node's pod store, which answers for its loop
// (ActivePods, KillPod, PodCleanedUp, ShouldPodContentBeRemoved, ...), as
// the parts of an agent built before the loop see it.
func (n *SimNode) PodStore() *syncloop.PodStore { return n.store }

// Runtime returns the fake runtime the node runs pods on, to script
// container exits, image failures and outages.
func (n *SimNode) Runtime() *FakeRuntime { return n.rt }

// AddPod sends the pods as new (ADD), as the API server does when they
// are bound to the node. The node owns them afterwards.
func (n *SimNode) AddPod(pods ...*v1.Pod) { n.send(nodekit.ADD, pods) }

// UpdatePod sends new versions of known pods (UPDATE).
func (n *SimNode) UpdatePod(pods ...*v1.Pod) { n.send(nodekit.UPDATE, pods) }

// DeletePod deletes a pod gracefully, as the API server does: a copy with
// deletionTimestamp now and the pod's termination grace period (30 s when
// unset) is sent as DELETE. Once the pod has stopped and its final status
// is published, the sink's delete removes it from the node.
func (n *SimNode) DeletePod(pod *v1.Pod) {
	del := pod.DeepCopy()
	now := metav1.Now()
	grace := int64(30)
	if del.Spec.TerminationGracePeriodSeconds != nil {
		grace = *del.Spec.TerminationGracePeriodSeconds
	}
	del.DeletionTimestamp, del.DeletionGracePeriodSeconds = &now, &grace
	n.send(nodekit.DELETE, []*v1.Pod{del})
}

// ReconcilePod sends new versions of known pods whose status alone
// changed (RECONCILE), as the API server's watch does when a controller
// sets a readiness gate's condition.
func (n *SimNode) ReconcilePod(pods ...*v1.Pod) { n.send(nodekit.RECONCILE, pods) }

// RemovePod sends the pods as gone (REMOVE), as after a forced deletion:
// the node stops them without waiting for anything.
func (n *SimNode) RemovePod(pods ...*v1.Pod) { n.send(nodekit.REMOVE, pods) }

func (n *SimNode) send(op nodekit.Op, pods []*v1.Pod) {
	select {
	case n.updates <- nodekit.PodUpdate{Op: op, Pods: pods, Source: nodekit.SourceAPI}:
	case <-n.done:
	}
}

// Status returns the pod's status as the node holds it now (what the
// status manager has, published or not), and whether there is one.
func (n *SimNode) Status(uid types.UID) (v1.PodStatus, bool) { return n.status.GetPodStatus(uid) }

// ContainerStatus returns the named container's (or init container's)
// status within the pod's status.
func (n *SimNode) ContainerStatus(uid types.UID, name string) (v1.ContainerStatus, bool) {
	st, _ := n.Status(uid)
	for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for _, c := range list {
			if c.Name == name {
				return c, true
			}
		}
	}
	return v1.ContainerStatus{}, false
}

// Published returns the statuses the sink accepted for the pod, oldest
// first. The slice is the caller's.
func (n *SimNode) Published(uid types.UID) []v1.PodStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]v1.PodStatus(nil), n.published[uid]...)
}

// Deleted reports whether the sink was asked to delete the pod (it had
// finished after a graceful deletion).
func (n *SimNode) Deleted(uid types.UID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.deleted[uid]
}

// Healthy is the sync loop's health: an error while it waits for an
// unavailable runtime (or an unhealthy PLEG).
func (n *SimNode) Healthy() error { return n.loop.Healthy() }

// SetProbe sets the result of the named container's probe of the given
// kind, for the container's current instance (a restarted container starts
// without results), and wakes the pod's worker. It fails when the runtime
// has no such container.
func (n *SimNode) SetProbe(uid types.UID, container string, kind syncloop.ProbeKind, result syncloop.ProbeResult) error {
	id, ok := n.rt.newestContainer(uid, container)
	if !ok {
		return fmt.Errorf("agenttest: SetProbe: no container %q in pod %s", container, uid)
	}
	n.mu.Lock()
	n.probes[probeKey{kind, id}] = result
	n.mu.Unlock()
	select {
	case n.probeWake <- uid:
	case <-n.done:
	}
	return nil
}

// Settle lets d of (fake) time pass and then waits until every goroutine
// of the bubble is blocked, so everything the node does in reaction has
// been done. It must be called from inside a synctest bubble.
func (n *SimNode) Settle(d time.Duration) {
	time.Sleep(d) //nolint:forbidigo // inside a synctest bubble this advances the bubble's fake clock
	synctest.Wait()
}

// WaitFor polls the pod's status every 10 ms until cond holds and returns
// it, or returns an error naming the last status when ctx ends first. It
// works inside and outside a synctest bubble.
func (n *SimNode) WaitFor(ctx context.Context, uid types.UID, cond func(v1.PodStatus) bool) (v1.PodStatus, error) {
	for {
		st, ok := n.Status(uid)
		if ok && cond(st) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("agenttest: pod %s: condition not reached (phase %q, %d container statuses): %w",
				uid, st.Phase, len(st.ContainerStatuses), ctx.Err())
		case <-time.After(10 * time.Millisecond): //nolint:forbidigo // fake time in a synctest bubble; outside one, polls a real node
		}
	}
}

// simSink records what the status manager publishes and answers a final
// delete by removing the pod, as the API server's deletion would.
type simSink struct{ n *SimNode }

func (s simSink) SetPodStatus(ctx context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	s.n.mu.Lock()
	s.n.published[pod.UID] = append(s.n.published[pod.UID], *st.DeepCopy())
	s.n.mu.Unlock()
	if s.n.forward != nil {
		return s.n.forward.SetPodStatus(ctx, pod, st)
	}
	return nil
}

func (s simSink) DeletePod(ctx context.Context, pod *v1.Pod) error {
	if s.n.forward != nil {
		if err := s.n.forward.DeletePod(ctx, pod); err != nil {
			return err
		}
	}
	s.n.mu.Lock()
	s.n.deleted[pod.UID] = true
	s.n.mu.Unlock()
	gone := pod.DeepCopy()
	if s.n.clock != nil {
		s.n.send(nodekit.REMOVE, []*v1.Pod{gone}) // buffered; the next Drain takes it
		return nil
	}
	go s.n.send(nodekit.REMOVE, []*v1.Pod{gone})
	return nil
}

// simProbes serves the scripted probe results to the loop.
type simProbes struct{ n *SimNode }

func (p simProbes) Result(kind syncloop.ProbeKind, id nodekit.ContainerID) (syncloop.ProbeResult, bool) {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	r, ok := p.n.probes[probeKey{kind, id}]
	return r, ok
}

// newestContainer returns the ID of the newest container of that name in
// the pod, whether or not the runtime is available.
func (f *FakeRuntime) newestContainer(uid types.UID, name string) (nodekit.ContainerID, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.pods[uid]; p != nil {
		for _, c := range p.containers {
			if c.Name == name {
				return c.ID, true
			}
		}
	}
	return nodekit.ContainerID{}, false
}

// ready reports the fake runtime's availability, as a CRI runtime's
// readiness check would.
func (f *FakeRuntime) ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkLocked()
}

var (
	_ nodekit.StatusSink    = simSink{}
	_ syncloop.ProbeResults = simProbes{}
	_ syncloop.MirrorClient = simMirrors{}
)
