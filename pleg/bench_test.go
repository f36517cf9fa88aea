package pleg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
)

const (
	benchPods          = 250 // 250 pods x 4 containers = 1000 containers
	benchContainers    = 4
	benchChangedPerOp  = 10 // pods whose first container is replaced before each relist
	benchTotalRunning  = benchPods * benchContainers
	benchSandboxEvents = benchPods
)

// benchSetup fills a fake runtime with benchPods pods of benchContainers
// running containers each, and relists a Generic PLEG after every 100 pods
// (the event channel holds 1000 events): when it returns, the PLEG has seen
// every container and the cache holds every pod.
func benchSetup(b *testing.B) (*agenttest.FakeRuntime, []*v1.Pod, *pleg.Generic, *clocktesting.FakeClock) {
	b.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := agenttest.NewFakeRuntime(clk)
	cache := pleg.NewCache()
	g := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})
	pods := make([]*v1.Pod, benchPods)
	events := 0
	for i := range pods {
		uid := types.UID(fmt.Sprintf("pod-%04d", i))
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + string(uid), Namespace: "bench", UID: uid}}
		idx := make([]int, benchContainers)
		for c := range idx {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", c), Image: "busybox"})
			idx[c] = c
		}
		req := nodekit.SyncPodRequest{Pod: p, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: idx}}
		if err := rt.SyncPod(b.Context(), req).Err(); err != nil {
			b.Fatal(err)
		}
		pods[i] = p
		if i%100 == 99 || i == len(pods)-1 {
			clk.Step(time.Second)
			g.Relist(b.Context())
			events += drainCount(g)
		}
	}
	if events != benchTotalRunning+benchSandboxEvents {
		b.Fatalf("set-up relists sent %d events, want %d", events, benchTotalRunning+benchSandboxEvents)
	}
	if st, err := cache.Get(pods[benchPods-1].UID); err != nil || st == nil || len(st.Containers) != benchContainers {
		b.Fatalf("cache after set-up: %+v, %v", st, err)
	}
	return rt, pods, g, clk
}

// drainCount empties the event channel and returns how many events it held.
func drainCount(g *pleg.Generic) int {
	n := 0
	for {
		select {
		case <-g.Events():
			n++
		default:
			return n
		}
	}
}

// BenchmarkRelist1000Containers measures one relist of the generic PLEG
// against a fake runtime holding 250 pods of 4 running containers (1000
// containers, 250 sandboxes).
//
// unchanged: nothing changed since the last relist (the steady state: one
// ListPods, no GetPodStatus). changed: before each relist (untimed), the
// first container of 10 pods exits, is replaced by a new one and removed,
// so the relist sends Died/Removed/Started events and inspects 10 pods.
func BenchmarkRelist1000Containers(b *testing.B) {
	b.Run("unchanged", func(b *testing.B) {
		_, _, g, _ := benchSetup(b)
		ctx := b.Context()
		b.ReportAllocs()
		for b.Loop() {
			g.Relist(ctx)
		}
		if n := drainCount(g); n != 0 {
			b.Fatalf("unchanged relists sent %d events", n)
		}
	})

	b.Run("changed", func(b *testing.B) {
		rt, pods, g, clk := benchSetup(b)
		ctx := b.Context()
		next := 0
		churn := func() {
			for range benchChangedPerOp {
				p := pods[next%benchPods]
				next++
				replaceFirst(ctx, b, rt, p)
			}
			clk.Step(time.Second)
		}
		churn()
		g.Relist(ctx)
		// Per pod: the old container Died and Removed, the new one Started.
		if n := drainCount(g); n != 3*benchChangedPerOp {
			b.Fatalf("relist after churn sent %d events, want %d", n, 3*benchChangedPerOp)
		}
		events := 0
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			churn()
			b.StartTimer()
			g.Relist(ctx)
			events += drainCount(g)
		}
		b.ReportMetric(float64(events)/float64(b.N), "events/op")
	})
}

// replaceFirst ends container c0 of p, starts a new c0 and removes the old
// one, as a restart followed by garbage collection would.
func replaceFirst(ctx context.Context, b *testing.B, rt *agenttest.FakeRuntime, p *v1.Pod) {
	st, err := rt.GetPodStatus(ctx, p.UID, p.Name, p.Namespace)
	if err != nil {
		b.Fatal(err)
	}
	var old nodekit.ContainerID
	for _, c := range st.Containers {
		if c.Name == "c0" && c.State == nodekit.StateRunning {
			old = c.ID
		}
	}
	if err := rt.ExitContainer(p.UID, "c0", 1); err != nil {
		b.Fatal(err)
	}
	req := nodekit.SyncPodRequest{Pod: p, Actions: nodekit.PodActions{SandboxID: st.Sandboxes[0].ID, ContainersToStart: []int{0}}}
	if err := rt.SyncPod(ctx, req).Err(); err != nil {
		b.Fatal(err)
	}
	if err := rt.RemoveContainer(ctx, old); err != nil {
		b.Fatal(err)
	}
}
