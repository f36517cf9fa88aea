package syncloop

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/internal/podutil"
)

// PodStore holds the pods the agent was told to run, and the mirror pods
// of its static pods, by UID and by full name. It is shared state: a main
// builds it first (NewPodStore) and hands it to the Loop (Config.Pods),
// which alone writes it, and to everything that reads pods by UID or
// mirror pods by name (statusmgr's Pods and Mirrors, a probe relay, the
// node API). It is safe for concurrent use.
//
// The store also answers for the loop it is given to: ActivePods,
// NotTerminatedPods, SourcesReady, PodCleanedUp, KillPod,
// ShouldPodContentBeRemoved and ShouldPodRuntimeBeRemoved are the Loop's
// methods of those names, so parts built before the loop (admission
// policies, resource managers, eviction and garbage collection, node
// shutdown, in-place resize) are handed the store rather than a closure
// over a loop variable assigned later. syncloop.New attaches the loop; a
// store serves one loop. Until then the store reports what is true of a
// node where nothing runs yet: no active pods, sources not ready, every
// pod cleaned up, nothing of a pod to be removed, and KillPod fails.
type PodStore struct {
	mu      sync.RWMutex
	pods    map[types.UID]*v1.Pod
	mirrors map[string]*v1.Pod // by full name

	loop atomic.Pointer[Loop] // set once by New
}

// errNoLoop is KillPod's error before a loop runs on the store.
var errNoLoop = errors.New("syncloop: no Loop runs on this pod store yet")

// attach makes l the loop the store answers for; false if it has one.
func (s *PodStore) attach(l *Loop) bool { return s.loop.CompareAndSwap(nil, l) }

// ActivePods is Loop.ActivePods; none before a loop runs on the store.
func (s *PodStore) ActivePods() []*v1.Pod {
	if l := s.loop.Load(); l != nil {
		return l.ActivePods()
	}
	return nil
}

// NotTerminatedPods is Loop.NotTerminatedPods; none before a loop runs on
// the store.
func (s *PodStore) NotTerminatedPods() []*v1.Pod {
	if l := s.loop.Load(); l != nil {
		return l.NotTerminatedPods()
	}
	return nil
}

// SourcesReady is Loop.SourcesReady; false before a loop runs on the store.
func (s *PodStore) SourcesReady() bool {
	l := s.loop.Load()
	return l != nil && l.SourcesReady()
}

// PodCleanedUp is Loop.PodCleanedUp; true before a loop runs on the store
// (no worker has the pod).
func (s *PodStore) PodCleanedUp(ctx context.Context, pod *v1.Pod) bool {
	l := s.loop.Load()
	return l == nil || l.PodCleanedUp(ctx, pod)
}

// ShouldPodContentBeRemoved is Loop.ShouldPodContentBeRemoved; false
// before a loop runs on the store.
func (s *PodStore) ShouldPodContentBeRemoved(uid types.UID) bool {
	l := s.loop.Load()
	return l != nil && l.ShouldPodContentBeRemoved(uid)
}

// ShouldPodRuntimeBeRemoved is Loop.ShouldPodRuntimeBeRemoved; false
// before a loop runs on the store.
func (s *PodStore) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	l := s.loop.Load()
	return l != nil && l.ShouldPodRuntimeBeRemoved(uid)
}

// KillPod is Loop.KillPod; an error before a loop runs on the store.
func (s *PodStore) KillPod(ctx context.Context, pod *v1.Pod, gracePeriodSeconds int64, status func(*v1.PodStatus)) error {
	l := s.loop.Load()
	if l == nil {
		return errNoLoop
	}
	return l.KillPod(ctx, pod, gracePeriodSeconds, status)
}

// NewPodStore returns an empty pod store.
func NewPodStore() *PodStore {
	return &PodStore{pods: map[types.UID]*v1.Pod{}, mirrors: map[string]*v1.Pod{}}
}

func (s *PodStore) set(pod *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if podutil.IsMirror(pod) {
		s.mirrors[podutil.FullName(pod)] = pod
		return
	}
	s.pods[pod.UID] = pod
}

func (s *PodStore) remove(pod *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if podutil.IsMirror(pod) {
		if m, ok := s.mirrors[podutil.FullName(pod)]; ok && m.UID == pod.UID {
			delete(s.mirrors, podutil.FullName(pod))
		}
		return
	}
	delete(s.pods, pod.UID)
}

// GetPodByUID returns a pod the agent was told to run (not a mirror pod).
func (s *PodStore) GetPodByUID(uid types.UID) (*v1.Pod, bool) { return s.get(uid) }

// GetMirrorPod returns the mirror pod with the full name NAME_NAMESPACE.
func (s *PodStore) GetMirrorPod(fullName string) (*v1.Pod, bool) { return s.mirrorByFullName(fullName) }

// Pods returns every pod the agent was told to run (terminated ones
// included until they are removed; mirror pods excluded), oldest first.
func (s *PodStore) Pods() []*v1.Pod { return s.all() }

func (s *PodStore) get(uid types.UID) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.pods[uid]
	return p, ok
}

// mirrorOf returns the mirror pod of a static pod, if any.
func (s *PodStore) mirrorOf(pod *v1.Pod) *v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mirrors[podutil.FullName(pod)]
}

// mirrorByFullName returns a mirror pod by NAME_NAMESPACE.
func (s *PodStore) mirrorByFullName(name string) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.mirrors[name]
	return p, ok
}

// staticFor returns the static pod a mirror pod belongs to.
func (s *PodStore) staticFor(mirror *v1.Pod) *v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, p := range s.pods {
		if podutil.FullName(p) == podutil.FullName(mirror) && podutil.IsStatic(p) {
			return p
		}
	}
	return nil
}

// all returns the pods (not mirrors), oldest first.
func (s *PodStore) all() []*v1.Pod {
	s.mu.RLock()
	out := make([]*v1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		out = append(out, p)
	}
	s.mu.RUnlock()
	sortByCreation(out)
	return out
}

// orphanMirrors returns the mirror pods whose static pod is gone.
func (s *PodStore) orphanMirrors() []*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	static := map[string]bool{}
	for _, p := range s.pods {
		if podutil.IsStatic(p) {
			static[podutil.FullName(p)] = true
		}
	}
	var out []*v1.Pod
	for name, m := range s.mirrors {
		if !static[name] {
			out = append(out, m)
		}
	}
	return out
}

func sortByCreation(pods []*v1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool {
		return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp)
	})
}
