package cgroupmgr

import (
	"slices"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
)

type opRecorder struct{ ops []string }

func (r *opRecorder) ObserveCgroupOperation(op string, _ time.Duration) { r.ops = append(r.ops, op) }

// TestOperationMetrics: a pod cgroup made for the first time is a
// "create", applied again an "update", removed a "destroy"; each QoS tier
// resized is an "update", as upstream labels them.
func TestOperationMetrics(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	rec := &opRecorder{}
	cfg := nodeConfig(fakeV1Root(t), &killRecorder{})
	cfg.Metrics, cfg.Clock = rec, testingclock.NewFakeClock(time.Unix(0, 0))
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rec.ops) != 0 {
		t.Fatalf("Start recorded %v, want nothing (the node tiers are not pod operations)", rec.ops)
	}
	for range 2 {
		if _, err := m.EnsurePod(ctx, burstablePod); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.UpdateQOS(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.DestroyPod(ctx, burstablePod.UID); err != nil {
		t.Fatal(err)
	}
	want := []string{"create", "update", "update", "update", "update", "destroy"}
	if !slices.Equal(rec.ops, want) {
		t.Errorf("operations = %v, want %v", rec.ops, want)
	}
}
