package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestPrintReport: two agents observed for two minutes; the table holds
// medians, maxima, sums and per-minute rates of their samples, and the
// request kinds are averaged per agent, most frequent first.
func TestPrintReport(t *testing.T) {
	from := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r := &result{
		opts:         options{nodes: 2, podsPerNode: 3, duration: 2 * time.Minute},
		readyAfter:   1500 * time.Millisecond,
		runningAfter: 2500 * time.Millisecond,
		window:       window{from: from, to: from.Add(2 * time.Minute)},
		wholeRun:     200 * time.Second,
		observations: 24, notReady: 1, maxLeaseAge: 11 * time.Second,
		podsRunningEnd: 6, cpuWholeRun: 9.5,
		apiserverCPUWindow: 12, apiserverCPUWholeRun: 30,
		apiserverRSSMaxKB: 400 << 10, apiserverRSSEndKB: 300 << 10,
		requests: map[string]*userRequests{
			"system:node:hollow-0001": {total: 20, byKind: map[string]int{"patch nodes/status": 4, "update leases": 16}},
			"system:node:hollow-0002": {total: 40, byKind: map[string]int{"update leases": 16, "get nodes": 24}},
		},
	}
	agents := []*agentProc{
		{name: "hollow-0001", cpuAtStart: 1, cpuAtEnd: 2.2, rssMaxKB: 30 << 10, rssEndKB: 20 << 10, hwmKB: 32 << 10, anonEndKB: 10 << 10, pssEndKB: 15 << 10},
		{name: "hollow-0002", cpuAtStart: 2, cpuAtEnd: 2.6, rssMaxKB: 50 << 10, rssEndKB: 40 << 10, hwmKB: 52 << 10, anonEndKB: 12 << 10, pssEndKB: 25 << 10},
	}
	var b bytes.Buffer
	printReport(&b, r, agents)
	out := b.String()
	for _, want := range []string{
		"hollow nodes × 3 pods on",
		"| nodes | 2 |",
		"| pods Running at the end / created | 6 / 6 |",
		"| all nodes Ready, from the agents' start | 1.5 s |",
		"| all pods Running, from their creation | 2.5 s |",
		"| all nodes Ready throughout (observations missed) | **no** (1 of 24) |",
		"| Leases fresh throughout (stale observations; oldest renewTime seen) | yes (0 of 24; 11.0 s) |",
		"| agents exited during the window | 0 |",
		"| agent RSS at the end, median / max | 30.0 / 40.0 MiB |",
		"| agent RSS sampled in the window, largest: median / max | 40.0 / 50.0 MiB |",
		"| agent peak RSS (VmHWM), median / max | 42.0 / 52.0 MiB |",
		"| agent anonymous RSS at the end (RssAnon: not the binary's shared pages), median / max | 11.0 / 12.0 MiB |",
		"| memory of all agents at the end (sum of PSS) | 40 MiB |",
		"| agent CPU in the window, all agents | 1.80 s (1.5% of one core) |",
		"| agent CPU in the window, per agent median / max | 0.90 / 1.20 s |",
		"| agent CPU over the whole run, all agents | 9.50 s in 200 s |",
		"| API requests per minute per agent, median / max | 15.0 / 20.0 |",
		"| API requests per minute, all agents | 30.0 |",
		"| API server RSS at the end / largest sampled | 300 / 400 MiB |",
		"| API server CPU in the window / whole run | 12.00 s (10.0% of one core) / 30.00 s |",
		// 32 updates, 24 gets, 4 patches in 2 minutes by 2 agents.
		"| update leases | 8.00 |\n| get nodes | 6.00 |\n| patch nodes/status | 1.00 |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestFailures: a run fails for each of an exited agent, a missed
// observation and a pod not Running at the end, and names each.
func TestFailures(t *testing.T) {
	ok := result{opts: options{nodes: 2, podsPerNode: 3}, podsRunningEnd: 6, observations: 24}
	if err := ok.failures(); err != nil {
		t.Errorf("a clean run: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*result)
		want   string
	}{
		{"agent exited", func(r *result) { r.exited = 1 }, "1 agents exited"},
		{"not Ready", func(r *result) { r.notReady = 2 }, "2 node observations not Ready, 0 with a stale Lease"},
		{"stale Lease", func(r *result) { r.staleLease = 3 }, "0 node observations not Ready, 3 with a stale Lease"},
		{"pod not Running", func(r *result) { r.podsRunningEnd = 5 }, "5 of 6 pods Running at the end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.change(&r)
			if err := r.failures(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("failures() = %v, want %q", err, tc.want)
			}
		})
	}
}
