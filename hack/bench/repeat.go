package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// roundOrder is the order the agents run in round i (from 0) of a
// --repeat run: the given order turned left by i, so that over the rounds
// each agent runs early and late and a drift of the machine (another
// process, the file system's recently freed inodes) does not fall on one
// agent alone.
func roundOrder(agents []string, i int) []string {
	if len(agents) == 0 {
		return nil
	}
	k := i % len(agents)
	return append(slices.Clone(agents[k:]), agents[:k]...)
}

// median is the middle of vs (the mean of the two middle values for an
// even count), leaving out negative values (not measured); -1 when none
// is left.
func median(vs []float64) float64 {
	var ok []float64
	for _, v := range vs {
		if v >= 0 {
			ok = append(ok, v)
		}
	}
	if len(ok) == 0 {
		return -1
	}
	slices.Sort(ok)
	n := len(ok)
	if n%2 == 1 {
		return ok[n/2]
	}
	return (ok[n/2-1] + ok[n/2]) / 2
}

// byAgent regroups the rounds' results by agent, each agent's in round
// order.
func byAgent(rounds [][]*result) map[string][]*result {
	out := map[string][]*result{}
	for _, round := range rounds {
		for _, r := range round {
			out[r.agent] = append(out[r.agent], r)
		}
	}
	return out
}

// printMedians writes, after the reports of a --repeat run's rounds, each
// figure's median over the rounds by agent with the ratio of each median
// to kubelet's, and for fullagent and each ideal agent that ran, the
// ratio of fullagent's time to all Running to the ideal agent's in each
// round and its median.
func printMedians(w io.Writer, o options, kubeletVersion string, rounds [][]*result) {
	runs := byAgent(rounds)
	fmt.Fprintf(w, "\nMedians over %d rounds (the agents' order turned by one each round):\n\n", len(rounds))
	header := []string{"figure"}
	for _, a := range o.agents {
		header = append(header, agentLabel(a, kubeletVersion))
	}
	var others []string
	if _, ok := runs[agentKubelet]; ok {
		for _, a := range o.agents {
			if a != agentKubelet {
				others = append(others, a)
				header = append(header, a+"/kubelet")
			}
		}
	}
	table(w, header)
	med := func(rw row, agent string) float64 {
		var vs []float64
		for _, r := range runs[agent] {
			vs = append(vs, rw.value(r))
		}
		return median(vs)
	}
	for _, rw := range rows(o) {
		cells := []string{rw.name}
		for _, a := range o.agents {
			cells = append(cells, format(med(rw, a), rw.unit, rw.prec))
		}
		for _, a := range others {
			cells = append(cells, ratioCell(med(rw, a), med(rw, agentKubelet)))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	printIdealRatios(w, o, rounds)
}

// printIdealRatios writes, for each ideal agent that ran beside fullagent,
// fullagent's time to all Running over the ideal agent's in each round
// (the two from the same round) and the median of those ratios.
func printIdealRatios(w io.Writer, o options, rounds [][]*result) {
	if !slices.Contains(o.agents, agentFull) {
		return
	}
	for _, a := range o.agents {
		if !isIdeal(a) {
			continue
		}
		var ratios []float64
		var cells []string
		for _, round := range rounds {
			full, ideal := find(round, agentFull), find(round, a)
			if full == nil || ideal == nil || ideal.allRunning <= 0 {
				cells = append(cells, "–")
				continue
			}
			q := full.allRunning.Seconds() / ideal.allRunning.Seconds()
			ratios = append(ratios, q)
			cells = append(cells, fmt.Sprintf("%.2f", q))
		}
		fmt.Fprintf(w, "\nfullagent's time to all Running ÷ %s's, by round: %s; median %s\n", a, strings.Join(cells, ", "), format(median(ratios), "", 2))
	}
}
