package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRoundOrder(t *testing.T) {
	agents := []string{"fullagent", "kubelet", "ideal"}
	for i, want := range [][]string{
		{"fullagent", "kubelet", "ideal"},
		{"kubelet", "ideal", "fullagent"},
		{"ideal", "fullagent", "kubelet"},
		{"fullagent", "kubelet", "ideal"},
	} {
		if got := roundOrder(agents, i); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", i, got, want)
		}
	}
	got := roundOrder(agents, 1)
	got[0], got[2] = "x", "y"
	if !slices.Equal(agents, []string{"fullagent", "kubelet", "ideal"}) {
		t.Errorf("roundOrder's result shares its input: %v", agents)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, -1, 1}, 3}, // the unmeasured value left out
		{[]float64{-1}, -1},
		{nil, -1},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestPrintMedians(t *testing.T) {
	res := func(agent string, allRunning time.Duration, cpu float64) *result {
		return &result{agent: agent, allRunning: allRunning, cpuSeconds: cpu, steadyWindow: time.Minute, goroutines0: -1, goroutinesN: -1}
	}
	o := options{pods: 100, agents: []string{agentFull, agentKubelet, agentIdeal}}
	rounds := [][]*result{
		{res(agentFull, 1500*time.Millisecond, 1), res(agentKubelet, 3*time.Second, 2), res(agentIdeal, 500*time.Millisecond, 0.1)},
		{res(agentKubelet, 2*time.Second, 3), res(agentIdeal, 250*time.Millisecond, 0.1), res(agentFull, 1*time.Second, 2)},
		{res(agentIdeal, 400*time.Millisecond, 0.1), res(agentFull, 2*time.Second, 1.5), res(agentKubelet, 4*time.Second, 4)},
	}
	var b bytes.Buffer
	printMedians(&b, o, "v1.37.2", rounds)
	out := b.String()
	for _, want := range []string{
		"| figure | fullagent | kubelet v1.37.2 | ideal | fullagent/kubelet | ideal/kubelet |",
		// medians 1.5, 3 and 0.4 s; 1.5/3 and 0.4/3
		"| all 100 pods Running | 1.50 s | 3.00 s | 0.40 s | 0.50 | 0.13 |",
		"| agent CPU during the burst | 1.50 s | 3.00 s | 0.10 s | 0.50 | 0.03 |",
		// 1.5/0.5, 1/0.25, 2/0.4, each round's own pair
		"fullagent's time to all Running ÷ ideal's, by round: 3.00, 4.00, 5.00; median 4.00",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
}
