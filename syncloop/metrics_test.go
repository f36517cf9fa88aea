package syncloop_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/syncloop"
)

type loopMetrics struct {
	mu        sync.Mutex
	ops       map[string]int
	started   []time.Time // firstSeen of each start observed
	running   []time.Time
	forgotten []types.UID
}

func (m *loopMetrics) ObservePodWorker(op string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops[op]++
}

func (m *loopMetrics) ObservePodStarted(_ *v1.Pod, firstSeen, running time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.started, m.running = append(m.started, firstSeen), append(m.running, running)
}

func (m *loopMetrics) ForgetPod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgotten = append(m.forgotten, uid)
}

var _ syncloop.Metrics = (*loopMetrics)(nil)

func TestLoopMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &loopMetrics{ops: map[string]int{}}
		n := agenttest.StartSimNode(t, agenttest.SimOptions{Loop: func(c *syncloop.Config) { c.Metrics = m }})
		seen := time.Now().Add(-time.Second)
		p := pod("u1", v1.RestartPolicyAlways, "app")
		p.Annotations = map[string]string{"kubernetes.io/config.seen": seen.Format("2006-01-02T15:04:05.000000000Z07:00")}
		n.AddPod(p)
		n.Settle(2 * time.Second)
		// Periodic syncs of the running pod observe no new start.
		n.Settle(70 * time.Second)

		m.mu.Lock()
		if len(m.started) != 1 || !m.started[0].Equal(seen) || !m.running[0].After(seen) {
			t.Fatalf("pod starts observed: first seen %v at %v; want one, first seen %v", m.started, m.running, seen)
		}
		if m.ops["create"] == 0 || m.ops["sync"] == 0 {
			t.Fatalf("worker operations %v, want create and sync", m.ops)
		}
		m.mu.Unlock()

		n.DeletePod(p) // graceful, 30 s
		n.Settle(5 * time.Second)
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.ops["terminated"] == 0 || len(m.forgotten) != 1 || m.forgotten[0] != "u1" {
			t.Fatalf("after delete: operations %v, forgotten %v; want terminated and u1", m.ops, m.forgotten)
		}
	})
}
