package syncloop

import (
	"sort"
	"sync"

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
type PodStore struct {
	mu      sync.RWMutex
	pods    map[types.UID]*v1.Pod
	mirrors map[string]*v1.Pod // by full name
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
