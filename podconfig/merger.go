package podconfig

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// updatesBuffer is the capacity of the Updates channel, as upstream.
const updatesBuffer = 50

// EventRecorder receives the merger's warnings about pods it drops. client-go's
// record.EventRecorder satisfies it.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// EventRecorderFunc adapts a function to EventRecorder.
type EventRecorderFunc func(object runtime.Object, eventtype, reason, messageFmt string, args ...any)

// Eventf implements EventRecorder.
func (f EventRecorderFunc) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	f(object, eventtype, reason, messageFmt, args...)
}

var _ EventRecorder = EventRecorderFunc(nil)

// ReasonFailedValidation is the event reason for a pod dropped as a duplicate.
const ReasonFailedValidation = "FailedValidation"

// Option adjusts New.
type Option func(*Merger)

// WithClock sets the clock that stamps kubernetes.io/config.seen (default
// the real clock).
func WithClock(c clock.PassiveClock) Option {
	return func(m *Merger) { m.clock = c }
}

// WithRecorder sends a warning event for every pod the merger drops (a
// second pod with the same namespace/name) to r, in addition to the log.
func WithRecorder(r EventRecorder) Option {
	return func(m *Merger) { m.recorder = r }
}

// WithSharedPods says the receiver of the merged updates never modifies a
// pod it is given: the merger hands out the pods it keeps instead of a deep
// copy of each. It never modifies a pod once handed out (an update makes a
// new version), so receiver and merger can share them. syncloop qualifies:
// it replaces a pod on update and changes none; at 1000 pods the copies it
// spares are megabytes of live heap.
func WithSharedPods() Option {
	return func(m *Merger) { m.share = true }
}

// Merger turns the snapshots and increments of several sources into one
// ordered stream of changes with upstream kubelet semantics. It keeps each
// source's pods; for every update from a source it emits, in this order:
//
//	REMOVE     pods gone from the source
//	ADD        pods it has not seen before
//	UPDATE     pods whose spec, labels, annotations or deletion grace changed
//	DELETE     pods whose change is a graceful deletion (deletionTimestamp set)
//	RECONCILE  pods whose status alone changed
//
// A pod's namespace/name belongs to the first source that brings it; a pod
// with the same name from another source is dropped (with a log line and a
// warning event) until the name is free again, when it is added. Mirror pods
// (the API server's copies of static pods) are exempt, as they always share
// their static pod's name.
//
// Merge is the synchronous step; Run drives it from the sources given to
// New. The merger's methods are safe for concurrent use.
type Merger struct {
	clock    clock.PassiveClock
	recorder EventRecorder
	share    bool // WithSharedPods
	sources  []nodekit.Source
	updates  chan nodekit.PodUpdate

	sendMu sync.Mutex // held while one source's results are sent, to keep them in order

	mu      sync.Mutex // guards the fields below
	state   map[string]*sourceState
	owners  map[string]string // pod full name -> the source whose pod has it
	seq     uint64            // orders dropped duplicates by arrival
	running bool
}

type sourceState struct {
	pods     map[types.UID]*v1.Pod // pods in force, owned by the merger
	shadowed map[types.UID]shadowedPod
	seen     bool // has sent a SET

	// named and names index the non-mirror pods of pods by namespace/name
	// (a pod's UID -> the name it was counted under; name -> how many),
	// so that freeing a name costs O(1), not a scan of the source's pods.
	named map[types.UID]string
	names map[string]int
}

func newSourceState() *sourceState {
	return &sourceState{pods: map[types.UID]*v1.Pod{}, shadowed: map[types.UID]shadowedPod{}, named: map[types.UID]string{}, names: map[string]int{}}
}

// put makes pod one of the source's pods in force.
func (st *sourceState) put(pod *v1.Pod) {
	if _, ok := st.pods[pod.UID]; !ok && !podutil.IsMirror(pod) {
		name := podutil.NamespacedKey(pod)
		st.named[pod.UID] = name
		st.names[name]++
	}
	st.pods[pod.UID] = pod
}

// drop removes the pod with uid from the source's pods in force, if there.
func (st *sourceState) drop(uid types.UID) (*v1.Pod, bool) {
	pod, ok := st.pods[uid]
	if !ok {
		return nil, false
	}
	delete(st.pods, uid)
	if name, counted := st.named[uid]; counted {
		delete(st.named, uid)
		if st.names[name]--; st.names[name] <= 0 {
			delete(st.names, name)
		}
	}
	return pod, true
}

// shadowedPod is a pod dropped because another source has its name; it is
// added if the name becomes free while its source still lists it.
type shadowedPod struct {
	pod *v1.Pod
	seq uint64
}

// New returns a merger of sources. Nothing runs until Run.
func New(sources []nodekit.Source, opts ...Option) *Merger {
	m := &Merger{
		clock:   clock.RealClock{},
		sources: slices.Clone(sources),
		updates: make(chan nodekit.PodUpdate, updatesBuffer),
		state:   map[string]*sourceState{},
		owners:  map[string]string{},
	}
	for _, opt := range opts {
		opt(m)
	}
	return m
}

// Updates returns the merged stream. Every update carries pods of one source
// (Source set), which the receiver owns (with WithSharedPods: may read, and
// keep, but not modify). The channel is closed when Run
// returns.
func (m *Merger) Updates() <-chan nodekit.PodUpdate { return m.updates }

// SeenAllSources reports whether every source given to New has sent at
// least one SET, so that a pod missing from the merged state really is gone
// (the sync loop waits for this before it removes anything). It does not
// block on Run.
func (m *Merger) SeenAllSources() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, src := range m.sources {
		if st := m.state[src.Name()]; st == nil || !st.seen {
			return false
		}
	}
	return true
}

// Run runs every source and sends the merged stream on Updates until ctx is
// done; then it waits for the sources to return, closes Updates and returns
// ctx's error. If a source returns on its own, Run stops the others and
// returns that source's error. Sources must stop sending once ctx is done.
// Run may be called once.
func (m *Merger) Run(ctx context.Context) error {
	if err := m.start(); err != nil {
		return err
	}
	defer close(m.updates)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var wg sync.WaitGroup
	for _, src := range m.sources {
		name := src.Name()
		sctx := klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "source", name))
		ch := make(chan nodekit.PodUpdate)
		wg.Go(func() {
			err := src.Run(sctx, ch)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				err = errors.New("returned while its context was live")
			}
			cancel(fmt.Errorf("podconfig: source %q: %w", name, err))
		})
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case u := <-ch:
					u.Source = name
					m.deliver(sctx, u)
				}
			}
		})
	}
	<-ctx.Done()
	wg.Wait()
	return context.Cause(ctx)
}

func (m *Merger) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running {
		return errors.New("podconfig: Run called twice")
	}
	m.running = true
	names := map[string]bool{}
	for i, src := range m.sources {
		switch name := src.Name(); {
		case name == "":
			return fmt.Errorf("podconfig: source %d has an empty name", i)
		case names[name]:
			return fmt.Errorf("podconfig: two sources named %q", name)
		default:
			names[name] = true
		}
	}
	return nil
}

// deliver merges u and sends the result on Updates, in order, unless ctx
// ends first.
func (m *Merger) deliver(ctx context.Context, u nodekit.PodUpdate) {
	m.sendMu.Lock()
	defer m.sendMu.Unlock()
	for _, out := range m.Merge(ctx, u) {
		select {
		case m.updates <- out:
		case <-ctx.Done():
			return
		}
	}
}

// Merge applies one update from source u.Source and returns the changes it
// makes, in the order REMOVE, ADD, UPDATE, DELETE, RECONCILE (empty ones left
// out; the first SET from a source that changes nothing yields one empty ADD,
// so the receiver learns the source is ready). u.Op says how to read u.Pods:
//
//	SET                 the source's complete set; pods not listed are gone
//	ADD, UPDATE, DELETE pods to add or change; others are untouched
//	REMOVE              pods gone from the source
//
// Merge takes ownership of u.Pods (it may keep them, and never modifies
// them: it annotates copies); the
// returned pods are copies the caller owns, or, with WithSharedPods, the
// merger's own pods, which neither side modifies. An unknown op, a pod without a
// UID or name, and a second pod with one namespace/name in u are reported
// (logger from ctx, events) and ignored. Merge does not block.
func (m *Merger) Merge(ctx context.Context, u nodekit.PodUpdate) []nodekit.PodUpdate {
	logger := klog.FromContext(ctx)
	if u.Source == "" {
		logger.Error(nil, "Ignoring pod update without a source", "op", u.Op, "pods", len(u.Pods))
		return nil
	}
	switch u.Op {
	case nodekit.SET, nodekit.ADD, nodekit.UPDATE, nodekit.DELETE, nodekit.REMOVE:
	default:
		logger.Error(nil, "Ignoring pod update with an unknown op", "op", u.Op, "source", u.Source, "pods", len(u.Pods))
		return nil
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state[u.Source]
	if st == nil {
		st = newSourceState()
		m.state[u.Source] = st
	}
	r := mergeRun{m: m, logger: logger, source: u.Source, st: st}
	firstSet := false
	switch u.Op {
	case nodekit.SET:
		firstSet = !st.seen
		st.seen = true
		r.set(r.filter(u.Pods))
	case nodekit.ADD, nodekit.UPDATE, nodekit.DELETE:
		for _, pod := range r.filter(u.Pods) {
			r.admit(pod, st.pods, st.shadowed)
		}
	case nodekit.REMOVE:
		for _, pod := range u.Pods {
			if pod != nil {
				r.remove(pod.UID)
			}
		}
	}
	return r.result(firstSet)
}

// mergeRun is the work of one Merge call.
type mergeRun struct {
	m      *Merger
	logger klog.Logger
	source string
	st     *sourceState

	adds, updates, deletes, removes, reconciles []*v1.Pod
	promoted                                    []promotion
}

type promotion struct {
	source string
	pod    *v1.Pod
}

// filter drops the pods of one update that cannot be merged: nil, without
// UID or name, or repeating a namespace/name or UID of an earlier pod of the
// same update.
func (r *mergeRun) filter(pods []*v1.Pod) []*v1.Pod {
	names := make(map[string]bool, len(pods))
	uids := make(map[types.UID]bool, len(pods))
	kept := make([]*v1.Pod, 0, len(pods))
	for i, pod := range pods {
		switch {
		case pod == nil:
			r.logger.Error(nil, "Ignoring nil pod", "source", r.source, "index", i)
		case pod.UID == "" || pod.Name == "":
			r.logger.Error(nil, "Ignoring pod without UID or name", "source", r.source, "index", i, "pod", klog.KObj(pod))
		case names[podutil.NamespacedKey(pod)] || uids[pod.UID]:
			r.logger.Info("Ignoring pod with a duplicate name or UID", "source", r.source, "index", i, "pod", klog.KObj(pod), "podUID", pod.UID)
			r.m.event(pod, "Error validating pod %s from %s due to duplicate pod name %q, ignoring", klog.KObj(pod), r.source, pod.Name)
		default:
			names[podutil.NamespacedKey(pod)] = true
			uids[pod.UID] = true
			kept = append(kept, pod)
		}
	}
	return kept
}

// set replaces the source's pods with pods.
func (r *mergeRun) set(pods []*v1.Pod) {
	oldPods, oldShadowed := r.st.pods, r.st.shadowed
	r.st.pods = make(map[types.UID]*v1.Pod, len(pods))
	r.st.shadowed = map[types.UID]shadowedPod{}
	r.st.named = make(map[types.UID]string, len(pods))
	r.st.names = make(map[string]int, len(pods))
	for _, pod := range pods {
		r.admit(pod, oldPods, oldShadowed)
	}
	var gone []*v1.Pod
	for uid, pod := range oldPods {
		if _, ok := r.st.pods[uid]; !ok {
			gone = append(gone, pod)
		}
	}
	sortPods(gone)
	for _, pod := range gone {
		r.removes = append(r.removes, pod)
		r.release(pod)
	}
}

// admit merges one pod of the source into its state; old and oldShadowed
// are the state before this update (the current maps for increments).
func (r *mergeRun) admit(ref *v1.Pod, old map[types.UID]*v1.Pod, oldShadowed map[types.UID]shadowedPod) {
	if existing, ok := old[ref.UID]; ok {
		next, change := mergeInto(existing, ref)
		r.st.put(next)
		switch change {
		case specChanged:
			r.updates = append(r.updates, next)
		case gracefulDeletion:
			r.deletes = append(r.deletes, next)
		case statusChanged:
			r.reconciles = append(r.reconciles, next)
		}
		return
	}

	ref = r.own(ref)
	name := podutil.NamespacedKey(ref)
	if !podutil.IsMirror(ref) {
		if owner, taken := r.m.owners[name]; taken && owner != r.source {
			prev, was := oldShadowed[ref.UID]
			seq := prev.seq
			if !was {
				r.m.seq++
				seq = r.m.seq
				r.logger.Info("Ignoring pod whose namespace/name another source has", "pod", klog.KObj(ref), "podUID", ref.UID, "source", r.source, "owner", owner)
				r.m.event(ref, "Pod %s from source %s has the namespace/name of a pod from source %s, ignoring it", klog.KObj(ref), r.source, owner)
			}
			r.st.shadowed[ref.UID] = shadowedPod{pod: ref, seq: seq}
			return
		}
		r.m.owners[name] = r.source
	}
	ref.Annotations[ConfigSeenAnnotation] = r.m.clock.Now().Format(seenTimeLayout)
	r.st.put(ref)
	r.adds = append(r.adds, ref)
}

// own returns the object the merger keeps for ref, a pod new to the
// source: a shallow copy of it with an annotations map of the merger's own,
// holding the config source (the seen time is added when it is in force).
// The source's object is never modified, so a source may keep it, as the
// checkpoint source does.
func (r *mergeRun) own(ref *v1.Pod) *v1.Pod {
	p := *ref
	p.Annotations = make(map[string]string, len(ref.Annotations)+2)
	maps.Copy(p.Annotations, ref.Annotations)
	p.Annotations[ConfigSourceAnnotation] = r.source
	return &p
}

// remove drops the pod with uid from the source.
func (r *mergeRun) remove(uid types.UID) {
	if pod, ok := r.st.drop(uid); ok {
		r.removes = append(r.removes, pod)
		r.release(pod)
		return
	}
	delete(r.st.shadowed, uid)
}

// release frees the name of a pod the source no longer has, unless another
// of its pods still has it, and hands it to the earliest dropped duplicate.
func (r *mergeRun) release(gone *v1.Pod) {
	name := podutil.NamespacedKey(gone)
	if r.m.owners[name] != r.source {
		return
	}
	if r.st.names[name] > 0 {
		return
	}
	delete(r.m.owners, name)

	var (
		bestSource string
		best       shadowedPod
	)
	for source, st := range r.m.state {
		for _, sp := range st.shadowed {
			if podutil.NamespacedKey(sp.pod) == name && (best.pod == nil || sp.seq < best.seq) {
				bestSource, best = source, sp
			}
		}
	}
	if best.pod == nil {
		return
	}
	st := r.m.state[bestSource]
	delete(st.shadowed, best.pod.UID)
	r.m.owners[name] = bestSource
	best.pod.Annotations[ConfigSeenAnnotation] = r.m.clock.Now().Format(seenTimeLayout)
	st.put(best.pod)
	r.promoted = append(r.promoted, promotion{source: bestSource, pod: best.pod})
	r.logger.Info("Adding pod whose namespace/name is free again", "pod", klog.KObj(best.pod), "source", bestSource)
}

// result builds the updates of this run, in upstream order, with copies of
// the pods, or the merger's own pods with WithSharedPods.
func (r *mergeRun) result(firstSet bool) []nodekit.PodUpdate {
	var out []nodekit.PodUpdate
	emit := func(op nodekit.Op, source string, pods []*v1.Pod) {
		if len(pods) > 0 {
			if !r.m.share {
				pods = copyPods(pods)
			}
			out = append(out, nodekit.PodUpdate{Op: op, Pods: pods, Source: source})
		}
	}
	emit(nodekit.REMOVE, r.source, r.removes)
	emit(nodekit.ADD, r.source, r.adds)
	for _, p := range r.promoted {
		emit(nodekit.ADD, p.source, []*v1.Pod{p.pod})
	}
	emit(nodekit.UPDATE, r.source, r.updates)
	emit(nodekit.DELETE, r.source, r.deletes)
	if firstSet && len(r.adds) == 0 && len(r.updates) == 0 && len(r.deletes) == 0 {
		out = append(out, nodekit.PodUpdate{Op: nodekit.ADD, Pods: []*v1.Pod{}, Source: r.source})
	}
	emit(nodekit.RECONCILE, r.source, r.reconciles)
	return out
}

func (m *Merger) event(pod *v1.Pod, format string, args ...any) {
	if m.recorder != nil {
		m.recorder.Eventf(pod, v1.EventTypeWarning, ReasonFailedValidation, format, args...)
	}
}

func sortPods(pods []*v1.Pod) {
	slices.SortFunc(pods, func(a, b *v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
}

func copyPods(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, len(pods))
	for i, p := range pods {
		out[i] = p.DeepCopy()
	}
	return out
}
