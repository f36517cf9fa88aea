package probes

import (
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

type probeCounts struct {
	mu        sync.Mutex
	results   map[string]int // "type/result/ns/pod/uid/container"
	forgotten []string
}

func (p *probeCounts) ObserveProbe(typ, result, ns, pod, uid, container string, _ time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.results[typ+"/"+result+"/"+ns+"/"+pod+"/"+uid+"/"+container]++
}

func (p *probeCounts) ForgetProbe(typ, ns, pod, uid, container string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgotten = append(p.forgotten, typ+"/"+ns+"/"+pod+"/"+uid+"/"+container)
}

var _ Metrics = (*probeCounts)(nil)

// Every probe run is counted by type and result, even below the
// thresholds; a stopped worker's series are forgotten.
func TestProbeMetrics(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	counts := &probeCounts{results: map[string]int{}}
	f.m.metrics = counts
	pod := testPod("p1", nil, execProbe(func(p *v1.Probe) { p.FailureThreshold = 3 }), nil)
	w := f.worker(pod, Readiness)
	f.running(pod, "c1", epoch)
	for _, code := range []int{0, 1, 1} {
		f.exec.answer(code, "", nil)
		w.step(ctx)
	}
	if got := counts.results["Readiness/successful/default/pod-p1/p1/app"]; got != 1 {
		t.Errorf("successful readiness probes = %d, want 1: %v", got, counts.results)
	}
	if got := counts.results["Readiness/failed/default/pod-p1/p1/app"]; got != 2 {
		t.Errorf("failed readiness probes = %d, want 2: %v", got, counts.results)
	}
	f.m.mu.Lock()
	f.m.stopLocked(w, false)
	f.m.mu.Unlock()
	if len(counts.forgotten) != 1 || counts.forgotten[0] != "Readiness/default/pod-p1/p1/app" {
		t.Errorf("forgotten = %v", counts.forgotten)
	}
}
