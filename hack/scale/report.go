package main

import (
	"cmp"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"
)

// printReport writes the run's figures as a Markdown table, then the API
// requests of an average agent by kind.
func printReport(w io.Writer, r *result, agents []*agentProc) {
	o := r.opts
	fmt.Fprintf(w, "\nScale run %s: %d hollow nodes × %d pods on %d CPUs, observed for %v (a check every %v).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), o.nodes, o.podsPerNode, runtime.NumCPU(), o.duration, observeEvery)
	fmt.Fprintln(w, "| figure | value |")
	fmt.Fprintln(w, "|---|---|")
	for _, row := range reportRows(r, agentSamples(r, agents)) {
		fmt.Fprintf(w, "| %s | %s |\n", row[0], row[1])
	}
	printRequestKinds(w, r, len(agents))
}

// samples are the agents' figures, one entry per agent.
type samples struct {
	rssEnd, rssMax, hwm, anon, pss []float64 // MiB
	cpuWin                         []float64 // CPU seconds in the window
	perMin                         []float64 // API requests per minute in the window
}

func agentSamples(r *result, agents []*agentProc) samples {
	mins := r.window.minutes()
	var s samples
	for _, a := range agents {
		s.rssEnd = append(s.rssEnd, mib(a.rssEndKB))
		s.rssMax = append(s.rssMax, mib(a.rssMaxKB))
		s.hwm = append(s.hwm, mib(a.hwmKB))
		s.anon = append(s.anon, mib(a.anonEndKB))
		s.pss = append(s.pss, mib(a.pssEndKB))
		s.cpuWin = append(s.cpuWin, a.cpuAtEnd-a.cpuAtStart)
		n := 0
		if u := r.requests["system:node:"+a.name]; u != nil {
			n = u.total
		}
		s.perMin = append(s.perMin, float64(n)/mins)
	}
	return s
}

// reportRows are the table's rows: figure, value.
func reportRows(r *result, s samples) [][2]string {
	o := r.opts
	winSec := r.window.to.Sub(r.window.from).Seconds()
	return [][2]string{
		{"nodes", fmt.Sprint(o.nodes)},
		{"pods Running at the end / created", fmt.Sprintf("%d / %d", r.podsRunningEnd, o.nodes*o.podsPerNode)},
		{"all nodes Ready, from the agents' start", fmt.Sprintf("%.1f s", r.readyAfter.Seconds())},
		{"all pods Running, from their creation", fmt.Sprintf("%.1f s", r.runningAfter.Seconds())},
		{"all nodes Ready throughout (observations missed)", fmt.Sprintf("%s (%d of %d)", yesNo(r.notReady), r.notReady, r.observations)},
		{"Leases fresh throughout (stale observations; oldest renewTime seen)", fmt.Sprintf("%s (%d of %d; %.1f s)", yesNo(r.staleLease), r.staleLease, r.observations, r.maxLeaseAge.Seconds())},
		{"agents exited during the window", fmt.Sprint(r.exited)},
		{"agent RSS at the end, median / max", medMax(s.rssEnd, " MiB", 1)},
		{"agent RSS sampled in the window, largest: median / max", medMax(s.rssMax, " MiB", 1)},
		{"agent peak RSS (VmHWM), median / max", medMax(s.hwm, " MiB", 1)},
		{"agent anonymous RSS at the end (RssAnon: not the binary's shared pages), median / max", medMax(s.anon, " MiB", 1)},
		{"memory of all agents at the end (sum of PSS)", fmt.Sprintf("%.0f MiB", total(s.pss))},
		{"agent CPU in the window, all agents", fmt.Sprintf("%.2f s (%.1f%% of one core)", total(s.cpuWin), 100*total(s.cpuWin)/winSec)},
		{"agent CPU in the window, per agent median / max", medMax(s.cpuWin, " s", 2)},
		{"agent CPU over the whole run, all agents", fmt.Sprintf("%.2f s in %.0f s", r.cpuWholeRun, r.wholeRun.Seconds())},
		{"API requests per minute per agent, median / max", medMax(s.perMin, "", 1)},
		{"API requests per minute, all agents", fmt.Sprintf("%.1f", total(s.perMin))},
		{"API server RSS at the end / largest sampled", fmt.Sprintf("%.0f / %.0f MiB", mib(r.apiserverRSSEndKB), mib(r.apiserverRSSMaxKB))},
		{"API server CPU in the window / whole run", fmt.Sprintf("%.2f s (%.1f%% of one core) / %.2f s", r.apiserverCPUWindow, 100*r.apiserverCPUWindow/winSec, r.apiserverCPUWholeRun)},
	}
}

// printRequestKinds writes the requests of an average agent in the
// window by kind, most frequent first.
func printRequestKinds(w io.Writer, r *result, agents int) {
	byKind := map[string]int{}
	for _, u := range r.requests {
		for k, n := range u.byKind {
			byKind[k] += n
		}
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(byKind[b], byKind[a]), cmp.Compare(a, b)) })
	fmt.Fprintf(w, "\nAPI requests per minute of an average agent in the window, by kind (a watch counts once, when it starts):\n\n")
	fmt.Fprintln(w, "| request | per minute |")
	fmt.Fprintln(w, "|---|---|")
	mins := r.window.minutes()
	for _, k := range kinds {
		fmt.Fprintf(w, "| %s | %.2f |\n", k, float64(byKind[k])/mins/float64(agents))
	}
}

func total(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

func medMax(xs []float64, unit string, prec int) string {
	return fmt.Sprintf("%.*f / %.*f%s", prec, median(xs), prec, slices.Max(xs), unit)
}

func yesNo(missed int) string {
	if missed == 0 {
		return "yes"
	}
	return "**no**"
}

func mib(kb int64) float64 { return float64(kb) / 1024 }

// median of xs (not sorted in place); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
