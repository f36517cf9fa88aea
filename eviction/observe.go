package eviction

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Observation is one reading of a signal: how much is available out of
// the capacity, in bytes, inodes or PIDs, and when it was read.
type Observation struct {
	Available int64
	Capacity  int64
	Time      time.Time
}

// Observations holds the reading of each signal the summary allowed.
type Observations map[Signal]Observation

// Observe derives the signals from a summary, as upstream: memory.available
// is Node.Memory.AvailableBytes out of available+working set; the
// filesystem signals come from Node.Fs (nodefs) and Node.Runtime.ImageFs
// (imagefs); pid.available is Rlimit.MaxPID minus the running processes. A
// signal whose numbers are missing is left out.
func Observe(sum *statsapi.Summary) Observations {
	obs := Observations{}
	if sum == nil {
		return obs
	}
	n := sum.Node
	if m := n.Memory; m != nil && m.AvailableBytes != nil && m.WorkingSetBytes != nil {
		obs[SignalMemoryAvailable] = Observation{Available: int64(*m.AvailableBytes),
			Capacity: int64(*m.AvailableBytes + *m.WorkingSetBytes), Time: m.Time.Time}
	}
	fs := func(f *statsapi.FsStats, bytes, inodes Signal) {
		if f == nil {
			return
		}
		if f.AvailableBytes != nil && f.CapacityBytes != nil {
			obs[bytes] = Observation{Available: int64(*f.AvailableBytes), Capacity: int64(*f.CapacityBytes), Time: f.Time.Time}
		}
		if f.InodesFree != nil && f.Inodes != nil {
			obs[inodes] = Observation{Available: int64(*f.InodesFree), Capacity: int64(*f.Inodes), Time: f.Time.Time}
		}
	}
	fs(n.Fs, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	if n.Runtime != nil {
		fs(n.Runtime.ImageFs, SignalImageFsAvailable, SignalImageFsInodesFree)
	}
	if r := n.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		obs[SignalPIDAvailable] = Observation{Available: *r.MaxPID - int64(*r.NumOfRunningProcesses),
			Capacity: *r.MaxPID, Time: r.Time.Time}
	}
	return obs
}

// ThresholdsMet returns the thresholds whose signal is below the
// threshold's amount, ignoring grace periods. With enforceMinReclaim the
// bar is raised by the minimum reclaim, which is how a threshold already
// met stays met until enough was reclaimed. Thresholds without an
// observation are not met.
func ThresholdsMet(thresholds []Threshold, obs Observations, enforceMinReclaim bool) []Threshold {
	var out []Threshold
	for _, t := range thresholds {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		bar := t.Value.Amount(o.Capacity)
		if enforceMinReclaim && t.MinReclaim != nil {
			bar += t.MinReclaim.Amount(o.Capacity)
		}
		if o.Available < bar {
			out = append(out, t)
		}
	}
	return out
}

// Conditions returns the node conditions driven by thresholds, in the
// order MemoryPressure, DiskPressure, PIDPressure.
func Conditions(thresholds []Threshold) []v1.NodeConditionType {
	var out []v1.NodeConditionType
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		for _, t := range thresholds {
			if t.Signal.Condition() == c {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// MetSince records when a threshold was first seen met.
type MetSince struct {
	Threshold Threshold
	Since     time.Time
}

// State is what the eviction decision carries from one observation to the
// next. The zero State is the start: nothing met, nothing observed.
type State struct {
	// FirstMet holds each currently met threshold and when it was first met
	// (grace periods count from there).
	FirstMet []MetSince
	// ConditionLastSeen is when each pressure condition was last observed.
	ConditionLastSeen map[v1.NodeConditionType]time.Time
	// Met are the thresholds met with their grace period elapsed at the
	// last step; they stay met until their minimum reclaim is satisfied.
	Met []Threshold
	// Last are the previous observations.
	Last Observations
}

// Evaluation is the outcome of one Evaluate.
type Evaluation struct {
	// Conditions are the pressure conditions to report: those observed
	// within the pressure-transition period.
	Conditions []v1.NodeConditionType
	// Met are the thresholds met past their grace period.
	Met []Threshold
	// Act are the thresholds of Met whose observation is newer than the
	// one acted on last time, the ones worth reclaiming for now.
	Act []Threshold
}

// Evaluate is the pure core of the manager: from the previous state, the
// configured thresholds, fresh observations and the time now, it decides
// which conditions hold and which thresholds call for reclaim, and returns
// the next state. A condition stays reported for transition after it was
// last observed, so the node does not flap; a soft threshold acts only
// after it has been met for its whole grace period.
func Evaluate(prev State, thresholds []Threshold, obs Observations, now time.Time, transition time.Duration) (State, Evaluation) {
	met := ThresholdsMet(thresholds, obs, false)
	for _, t := range ThresholdsMet(prev.Met, obs, true) {
		if !slices.ContainsFunc(met, t.equal) {
			met = append(met, t)
		}
	}
	var next State
	for _, t := range met {
		since := now
		for _, p := range prev.FirstMet {
			if p.Threshold.equal(t) {
				since = p.Since
				break
			}
		}
		next.FirstMet = append(next.FirstMet, MetSince{Threshold: t, Since: since})
	}
	next.ConditionLastSeen = map[v1.NodeConditionType]time.Time{}
	for c, at := range prev.ConditionLastSeen {
		next.ConditionLastSeen[c] = at
	}
	for _, c := range Conditions(met) {
		next.ConditionLastSeen[c] = now
	}
	var ev Evaluation
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		at, ok := next.ConditionLastSeen[c]
		if !ok {
			continue
		}
		if now.Sub(at) < transition || at.Equal(now) {
			ev.Conditions = append(ev.Conditions, c)
		} else {
			delete(next.ConditionLastSeen, c)
		}
	}
	for _, f := range next.FirstMet {
		if now.Sub(f.Since) >= f.Threshold.GracePeriod {
			ev.Met = append(ev.Met, f.Threshold)
		}
	}
	next.Met = ev.Met
	for _, t := range ev.Met {
		o := obs[t.Signal]
		last, seen := prev.Last[t.Signal]
		if !seen || o.Time.IsZero() || o.Time.After(last.Time) {
			ev.Act = append(ev.Act, t)
		}
	}
	next.Last = obs
	return next, ev
}
