package eviction

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestObserve(t *testing.T) {
	now := time.Unix(1000, 0)
	obs := Observe(nodeSummary(now, 300, 700, 10, 100))
	want := Observations{
		SignalMemoryAvailable:   {Available: 300, Capacity: 1000, Time: now},
		SignalNodeFsAvailable:   {Available: 10, Capacity: 100, Time: now},
		SignalNodeFsInodesFree:  {Available: 900, Capacity: 1000, Time: now},
		SignalImageFsAvailable:  {Available: 10, Capacity: 100, Time: now},
		SignalImageFsInodesFree: {Available: 900, Capacity: 1000, Time: now},
		SignalPIDAvailable:      {Available: 900, Capacity: 1000, Time: now},
	}
	for s, w := range want {
		if g := obs[s]; g.Available != w.Available || g.Capacity != w.Capacity || !g.Time.Equal(w.Time) {
			t.Errorf("%s = %+v, want %+v", s, g, w)
		}
	}
	if len(Observe(nil)) != 0 {
		t.Error("nil summary observed something")
	}
}

func TestThresholdsMetMinReclaim(t *testing.T) {
	th := Threshold{Signal: SignalMemoryAvailable, Value: Value{Quantity: qty("100")}, MinReclaim: &Value{Quantity: qty("50")}}
	obs := Observations{SignalMemoryAvailable: {Available: 120, Capacity: 1000}}
	if got := ThresholdsMet([]Threshold{th}, obs, false); len(got) != 0 {
		t.Errorf("met without min reclaim: %v", got)
	}
	if got := ThresholdsMet([]Threshold{th}, obs, true); len(got) != 1 {
		t.Errorf("not met with min reclaim: %v", got)
	}
	pct := Threshold{Signal: SignalNodeFsAvailable, Value: Value{Percentage: 0.2}}
	if got := ThresholdsMet([]Threshold{pct}, Observations{SignalNodeFsAvailable: {Available: 19, Capacity: 100}}, false); len(got) != 1 {
		t.Errorf("20%% of 100 with 19 available not met")
	}
	if got := ThresholdsMet([]Threshold{pct}, Observations{}, false); len(got) != 0 {
		t.Errorf("met without observation")
	}
}

// TestEvaluateGracePeriod walks a soft threshold through its grace period
// and the pressure-transition period with a fake clock.
func TestEvaluateGracePeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(10000, 0))
	soft := Threshold{Signal: SignalMemoryAvailable, Value: Value{Quantity: qty("200")}, GracePeriod: time.Minute}
	hard := Threshold{Signal: SignalNodeFsAvailable, Value: Value{Quantity: qty("5")}}
	ths := []Threshold{soft, hard}
	const transition = 5 * time.Minute
	var st State
	step := func(memAvail, fsAvail uint64) Evaluation {
		var ev Evaluation
		st, ev = Evaluate(st, ths, Observe(nodeSummary(clk.Now(), memAvail, 1000, fsAvail, 100)), clk.Now(), transition)
		return ev
	}
	type want struct {
		conds []v1.NodeConditionType
		met   []Signal
	}
	check := func(name string, ev Evaluation, w want) {
		t.Helper()
		if !slices.Equal(ev.Conditions, w.conds) {
			t.Errorf("%s: conditions %v, want %v", name, ev.Conditions, w.conds)
		}
		var got []Signal
		for _, m := range ev.Met {
			got = append(got, m.Signal)
		}
		if !slices.Equal(got, w.met) {
			t.Errorf("%s: met %v, want %v", name, got, w.met)
		}
	}
	check("calm", step(500, 50), want{})
	check("soft met: condition at once, no action", step(100, 50), want{conds: []v1.NodeConditionType{v1.NodeMemoryPressure}})
	clk.Step(59 * time.Second)
	check("grace not yet over", step(100, 50), want{conds: []v1.NodeConditionType{v1.NodeMemoryPressure}})
	clk.Step(time.Second)
	ev := step(100, 50)
	check("grace over", ev, want{conds: []v1.NodeConditionType{v1.NodeMemoryPressure}, met: []Signal{SignalMemoryAvailable}})
	if len(ev.Act) != 1 {
		t.Errorf("fresh observation should act: %v", ev.Act)
	}
	clk.Step(time.Second)
	check("hard acts at once", step(100, 1), want{conds: []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure},
		met: []Signal{SignalMemoryAvailable, SignalNodeFsAvailable}})
	clk.Step(time.Second)
	check("resolved, conditions held", step(500, 50), want{conds: []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure}})
	clk.Step(transition - 2*time.Second) // last seen 1s before the previous step
	check("just inside transition", step(500, 50), want{conds: []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure}})
	clk.Step(time.Second)
	check("transition over", step(500, 50), want{})
	check("soft met again restarts grace", step(100, 50), want{conds: []v1.NodeConditionType{v1.NodeMemoryPressure}})
}

func TestEvaluateMinReclaimKeepsMet(t *testing.T) {
	now := time.Unix(0, 0)
	th := Threshold{Signal: SignalNodeFsAvailable, Value: Value{Quantity: qty("10")}, MinReclaim: &Value{Quantity: qty("20")}}
	st, ev := Evaluate(State{}, []Threshold{th}, Observe(nodeSummary(now, 1, 1, 5, 100)), now, time.Minute)
	if len(ev.Met) != 1 {
		t.Fatalf("not met: %+v", ev)
	}
	now = now.Add(10 * time.Second)
	_, ev = Evaluate(st, []Threshold{th}, Observe(nodeSummary(now, 1, 1, 25, 100)), now, time.Minute)
	if len(ev.Met) != 1 {
		t.Errorf("25 available < 10+20: should stay met: %+v", ev)
	}
	_, ev = Evaluate(st, []Threshold{th}, Observe(nodeSummary(now, 1, 1, 31, 100)), now, time.Minute)
	if len(ev.Met) != 0 {
		t.Errorf("31 available >= 30: should be resolved: %+v", ev)
	}
}

func TestEvaluateStaleStatsDoNotAct(t *testing.T) {
	now := time.Unix(0, 0)
	th := Threshold{Signal: SignalNodeFsAvailable, Value: Value{Quantity: qty("10")}}
	obs := Observe(nodeSummary(now, 1, 1, 5, 100))
	st, ev := Evaluate(State{}, []Threshold{th}, obs, now, time.Minute)
	if len(ev.Act) != 1 {
		t.Fatalf("first: act %v", ev.Act)
	}
	_, ev = Evaluate(st, []Threshold{th}, obs, now.Add(time.Second), time.Minute)
	if len(ev.Met) != 1 || len(ev.Act) != 0 {
		t.Errorf("same stats again: met %v act %v, want met and no act", ev.Met, ev.Act)
	}
}
