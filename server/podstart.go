package server

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// pullTracker remembers, per pod, when its first image pull started and
// its last one finished, so the pod start SLI can leave pulling out.
type pullTracker struct {
	mu   sync.Mutex
	pods map[types.UID]pullPeriod
}

type pullPeriod struct{ first, last time.Time }

func newPullTracker() *pullTracker { return &pullTracker{pods: map[types.UID]pullPeriod{}} }

func (t *pullTracker) add(uid types.UID, started, finished time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.pods[uid]
	if !ok || started.Before(p.first) {
		p.first = started
	}
	if finished.After(p.last) {
		p.last = finished
	}
	t.pods[uid] = p
}

// take returns and forgets the pod's pulling time.
func (t *pullTracker) take(uid types.UID) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.pods[uid]
	delete(t.pods, uid)
	if !ok || p.last.Before(p.first) {
		return 0
	}
	return p.last.Sub(p.first)
}

// ObserveImagePull records a successful image pull for a pod: its
// duration (from the moment the pull was asked for, waiting for a turn
// included) by size bucket, and the period for the pod's start SLI.
func (m *AgentMetrics) ObserveImagePull(pod types.UID, sizeBytes uint64, asked, finished time.Time) {
	m.ImagePullDuration.WithLabelValues(ImageSizeBucket(sizeBytes)).Observe(finished.Sub(asked).Seconds())
	if pod != "" {
		m.pulls.add(pod, asked, finished)
	}
}

// ObservePodStarted records a pod's first Running status at running:
// kubelet_pod_start_duration_seconds from firstSeen (when the agent's
// configuration first saw it; zero records nothing there) and
// kubelet_pod_start_sli_duration_seconds from its creation, less the
// time between its first image pull starting and its last one finishing.
func (m *AgentMetrics) ObservePodStarted(pod *v1.Pod, firstSeen, running time.Time) {
	if !firstSeen.IsZero() {
		m.PodStartDuration.Observe(running.Sub(firstSeen).Seconds())
	}
	pulling := m.pulls.take(pod.UID)
	if created := pod.CreationTimestamp.Time; !created.IsZero() {
		if d := running.Sub(created) - pulling; d >= 0 {
			m.PodStartSLIDuration.WithLabelValues().Observe(d.Seconds())
		}
	}
}

// ForgetPod drops what is kept about a pod that will not start (deleted
// before it ran).
func (m *AgentMetrics) ForgetPod(uid types.UID) { m.pulls.take(uid) }

// imageSizeBuckets are upstream's image_size_in_bytes label values, by
// lower bound.
var imageSizeBuckets = []struct {
	above uint64
	label string
}{
	{100 << 30, "GT100GB"}, {60 << 30, "60GB-100GB"}, {40 << 30, "40GB-60GB"}, {30 << 30, "30GB-40GB"},
	{20 << 30, "20GB-30GB"}, {10 << 30, "10GB-20GB"}, {5 << 30, "5GB-10GB"}, {1 << 30, "1GB-5GB"},
	{500 << 20, "500MB-1GB"}, {100 << 20, "100MB-500MB"}, {10 << 20, "10MB-100MB"}, {0, "0-10MB"},
}

// ImageSizeBucket is the image_size_in_bytes label of an image of the
// given size, as upstream: "N/A" when the size is unknown (0).
func ImageSizeBucket(size uint64) string {
	if size == 0 {
		return "N/A"
	}
	for _, b := range imageSizeBuckets {
		if size > b.above {
			return b.label
		}
	}
	return ""
}
