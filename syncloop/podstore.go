package syncloop

import (
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// annotationMirror marks a mirror pod (the API object of a static pod).
const annotationMirror = "kubernetes.io/config.mirror"

func isMirror(pod *v1.Pod) bool {
	_, ok := pod.Annotations[annotationMirror]
	return ok
}

// fullName is upstream's pod full name, NAME_NAMESPACE.
func fullName(pod *v1.Pod) string { return pod.Name + "_" + pod.Namespace }

// podStore holds the pods the agent was told to run, and the mirror pods
// of its static pods, by UID and by full name.
type podStore struct {
	mu      sync.RWMutex
	pods    map[types.UID]*v1.Pod
	mirrors map[string]*v1.Pod // by full name
}

func newPodStore() *podStore {
	return &podStore{pods: map[types.UID]*v1.Pod{}, mirrors: map[string]*v1.Pod{}}
}

func (s *podStore) set(pod *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if isMirror(pod) {
		s.mirrors[fullName(pod)] = pod
		return
	}
	s.pods[pod.UID] = pod
}

func (s *podStore) remove(pod *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if isMirror(pod) {
		if m, ok := s.mirrors[fullName(pod)]; ok && m.UID == pod.UID {
			delete(s.mirrors, fullName(pod))
		}
		return
	}
	delete(s.pods, pod.UID)
}

func (s *podStore) get(uid types.UID) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.pods[uid]
	return p, ok
}

// mirrorOf returns the mirror pod of a static pod, if any.
func (s *podStore) mirrorOf(pod *v1.Pod) *v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mirrors[fullName(pod)]
}

// mirrorByFullName returns a mirror pod by NAME_NAMESPACE.
func (s *podStore) mirrorByFullName(name string) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.mirrors[name]
	return p, ok
}

// staticFor returns the static pod a mirror pod belongs to.
func (s *podStore) staticFor(mirror *v1.Pod) *v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, p := range s.pods {
		if fullName(p) == fullName(mirror) && isStatic(p) {
			return p
		}
	}
	return nil
}

// all returns the pods (not mirrors), oldest first.
func (s *podStore) all() []*v1.Pod {
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
func (s *podStore) orphanMirrors() []*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	static := map[string]bool{}
	for _, p := range s.pods {
		if isStatic(p) {
			static[fullName(p)] = true
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
