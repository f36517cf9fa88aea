package main

import (
	"cmp"
	"slices"
	"time"
)

// stages is a pod's start split where the bench can see it without
// patching an agent: from its creation to the agent's first API request
// naming it (the watch event reaching the agent, its pipeline up to the
// first call), from there to the status write that set it Running (the
// agent's work: sandbox, containers, PLEG, status), and from that write
// to the bench's watch showing the pod Running (the API server and the
// watch). total is creation to Running seen.
type stages struct {
	toFirstRequest, toRunningPatch, toSeen, total time.Duration
}

// startBreakdown is the stage figures of one burst.
type startBreakdown struct {
	// median is each stage's median over the pods with all four times
	// (stage by stage, so they need not add up to median.total).
	median stages
	// medianPod is the pod whose total is the median of all pods', and
	// its stages.
	medianPod       string
	medianPodStages stages
	// timed is how many pods had all four times; firstKinds counts what
	// their first request was.
	timed      int
	firstKinds map[string]int
}

// startStages computes the stage figures of a burst. Pods missing a time (no
// request naming them, no Running write found) count in no stage.
func startStages(times map[string]*podTimes) startBreakdown {
	b := startBreakdown{firstKinds: map[string]int{}}
	type timed struct {
		name string
		s    stages
	}
	var all []timed
	for name, t := range times {
		if t.created.IsZero() || t.firstRequest.IsZero() || t.runningPatch.IsZero() || t.runningSeen.IsZero() {
			continue
		}
		all = append(all, timed{name, stages{
			toFirstRequest: t.firstRequest.Sub(t.created),
			toRunningPatch: t.runningPatch.Sub(t.firstRequest),
			toSeen:         t.runningSeen.Sub(t.runningPatch),
			total:          t.runningSeen.Sub(t.created),
		}})
		b.firstKinds[t.firstKind]++
	}
	b.timed = len(all)
	if len(all) == 0 {
		return b
	}
	median := func(get func(stages) time.Duration) time.Duration {
		ds := make([]time.Duration, len(all))
		for i, p := range all {
			ds[i] = get(p.s)
		}
		slices.Sort(ds)
		return pct(ds, 50)
	}
	b.median = stages{
		toFirstRequest: median(func(s stages) time.Duration { return s.toFirstRequest }),
		toRunningPatch: median(func(s stages) time.Duration { return s.toRunningPatch }),
		toSeen:         median(func(s stages) time.Duration { return s.toSeen }),
		total:          median(func(s stages) time.Duration { return s.total }),
	}
	slices.SortFunc(all, func(x, y timed) int { return cmp.Or(cmp.Compare(x.s.total, y.s.total), cmp.Compare(x.name, y.name)) })
	m := all[(len(all)+1)/2-1] // the nearest-rank median, as pct
	b.medianPod, b.medianPodStages = m.name, m.s
	return b
}

// latencies is each pod's creation → Running seen, sorted.
func latencies(times map[string]*podTimes) []time.Duration {
	out := make([]time.Duration, 0, len(times))
	for _, t := range times {
		if !t.runningSeen.IsZero() {
			out = append(out, t.runningSeen.Sub(t.created))
		}
	}
	slices.Sort(out)
	return out
}
