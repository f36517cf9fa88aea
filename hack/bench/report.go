package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// machine describes where the bench ran.
type machine struct {
	os, cpu, kernel, runtime string
	cpus                     int
	memGiB                   float64
	date                     time.Time
}

func describeMachine() machine {
	m := machine{cpus: runtime.NumCPU(), date: time.Now().UTC(), os: "Linux", cpu: "unknown CPU", runtime: "runtime unknown"}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.os = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				m.memGiB = kb / (1 << 20)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	return m
}

// row is one line of the table: a figure and how to read it from a result.
type row struct {
	name  string
	value func(*result) float64
	unit  string // "s", "MiB", "" (count)
	prec  int
}

func rows(o options) []row {
	sec := func(d time.Duration) float64 { return d.Seconds() }
	mib := func(kb int64) float64 { return float64(kb) / 1024 }
	return []row{
		{"pod startup p50 (creation → Running)", func(r *result) float64 { return sec(r.p50) }, "s", 2},
		{"pod startup p99", func(r *result) float64 { return sec(r.p99) }, "s", 2},
		{fmt.Sprintf("all %d pods Running", o.pods), func(r *result) float64 { return sec(r.allRunning) }, "s", 2},
		{"agent CPU during the burst", func(r *result) float64 { return r.cpuSeconds }, "s", 2},
		{"agent peak RSS during the burst", func(r *result) float64 { return mib(r.peakKB) }, "MiB", 0},
		{"agent RSS, 0 pods", func(r *result) float64 { return mib(r.idle0KB) }, "MiB", 0},
		{fmt.Sprintf("agent RSS, %d pods", o.pods), func(r *result) float64 { return mib(r.idleNKB) }, "MiB", 0},
		{"agent anonymous RSS (heap, stacks), 0 pods", func(r *result) float64 { return mib(r.anon0KB) }, "MiB", 0},
		{fmt.Sprintf("agent anonymous RSS, %d pods", o.pods), func(r *result) float64 { return mib(r.anonNKB) }, "MiB", 0},
		{"API requests during the burst", func(r *result) float64 { return float64(r.burstRequests) }, "", 0},
		{"API requests per pod during the burst", func(r *result) float64 { return float64(r.burstRequests) / float64(o.pods) }, "", 1},
		{fmt.Sprintf("API requests/min, steady, %d pods", o.pods), func(r *result) float64 { return r.steadyPerMinute() }, "", 1},
		{fmt.Sprintf("agent CPU per minute, steady, %d pods", o.pods), func(r *result) float64 { return r.steadyCPUPerMinute() }, "s", 2},
		{"agent goroutines, 0 pods", func(r *result) float64 { return float64(r.goroutines0) }, "", 0},
		{fmt.Sprintf("agent goroutines, %d pods", o.pods), func(r *result) float64 { return float64(r.goroutinesN) }, "", 0},
		{"agent goroutines per pod", func(r *result) float64 { return goroutinesPerPod(r, o.pods) }, "", 2},
	}
}

// printReport writes the machine, the workload and the tables in Markdown:
// the figures of every agent, with each other agent's ratio to kubelet's
// when kubelet ran, the start-path stages, and the steady-state requests.
func printReport(w io.Writer, m machine, o options, kubeletVersion string, results []*result) {
	fmt.Fprintf(w, "\nMachine: %s, %d CPUs (%s), %.1f GiB RAM, kernel %s, %s, cgroup v1\n", m.os, m.cpus, m.cpu, m.memGiB, m.kernel, m.runtime)
	fmt.Fprintf(w, "Date: %s\n", m.date.Format("2006-01-02 15:04 MST"))
	what := "fresh etcd + kube-apiserver and containerd per agent"
	if o.runtime == runtimeFake {
		what = "on a fake CRI (nothing runs); fresh etcd + kube-apiserver and fake runtime per agent"
	}
	image := "image present"
	if o.pull {
		image = fmt.Sprintf("cold cache: pulled from a local registry on loopback, %d image name(s), same content", o.pullImages)
	}
	fmt.Fprintf(w, "Workload: %d busybox pods (`sleep 3600`, %s, imagePullPolicy IfNotPresent) created at once on a Ready node, "+
		"%s; steady window %v, starting %v after the last pod runs\n", o.pods, image, what, o.steady, settleSteady)
	var builds []string
	for _, r := range results {
		if r.build != "" {
			builds = append(builds, fmt.Sprintf("%s with -tags %s", r.agent, r.build))
		}
	}
	if len(builds) > 0 {
		fmt.Fprintf(w, "Builds: %s\n", strings.Join(builds, "; "))
	}
	if o.apiQPS > 0 {
		fmt.Fprintf(w, "API limits: kubeAPIQPS %d, kubeAPIBurst %d for fullagent and kubelet (not upstream's defaults, 50 and 100)\n", o.apiQPS, o.apiBurst)
	}
	fmt.Fprintln(w)

	header := []string{"figure"}
	for _, r := range results {
		header = append(header, agentLabel(r.agent, kubeletVersion))
	}
	kube := find(results, agentKubelet)
	var others []*result // agents with a ratio column
	if kube != nil {
		for _, r := range results {
			if r != kube {
				others = append(others, r)
				header = append(header, r.agent+"/kubelet")
			}
		}
	}
	table(w, header)
	all := rows(o)
	if o.pull {
		all = append(all, pullRows(o)...)
	}
	for _, rw := range all {
		cells := []string{rw.name}
		for _, r := range results {
			cells = append(cells, format(rw.value(r), rw.unit, rw.prec))
		}
		for _, r := range others {
			cells = append(cells, ratioCell(rw.value(r), rw.value(kube)))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	printStages(w, kubeletVersion, results)
	fmt.Fprintf(w, "\nAPI requests during the burst, by verb and resource:\n")
	for _, r := range results {
		fmt.Fprintf(w, "- %s: %s\n", r.agent, breakdown(r.burstByKind))
	}
	fmt.Fprintf(w, "\nAPI requests in the steady window (%v), by verb and resource:\n", o.steady)
	for _, r := range results {
		fmt.Fprintf(w, "- %s: %s\n", r.agent, breakdown(r.steadyByKind))
	}
}

func agentLabel(agent, kubeletVersion string) string {
	if agent == agentKubelet && kubeletVersion != "" {
		return agent + " " + kubeletVersion
	}
	return agent
}

// table writes a Markdown table header: the first column left-aligned, the
// others right-aligned.
func table(w io.Writer, header []string) {
	fmt.Fprintf(w, "| %s |\n|---%s|\n", strings.Join(header, " | "), strings.Repeat("|--:", len(header)-1))
}

// printStages writes the start-path stages: medians over the pods, and the
// median pod's own.
func printStages(w io.Writer, kubeletVersion string, results []*result) {
	fmt.Fprintf(w, "\nStart path of a pod, medians over the pods (pods are created bound, spec.nodeName set, so no scheduling; "+
		"creation and Running seen on the bench's clock, the agent's requests by the API server's audit log):\n\n")
	header := []string{"stage"}
	for _, r := range results {
		header = append(header, agentLabel(r.agent, kubeletVersion))
	}
	table(w, header)
	sec := func(d time.Duration) string { return format(d.Seconds(), "s", 3) }
	for _, st := range []struct {
		name string
		get  func(stages) time.Duration
	}{
		{"creation → agent's first request about the pod", func(s stages) time.Duration { return s.toFirstRequest }},
		{"first request → status write setting Running", func(s stages) time.Duration { return s.toRunningPatch }},
		{"Running write → Running seen by a watch", func(s stages) time.Duration { return s.toSeen }},
		{"creation → Running seen", func(s stages) time.Duration { return s.total }},
	} {
		cells := []string{st.name}
		for _, r := range results {
			cells = append(cells, sec(st.get(r.start.median)))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	for _, r := range results {
		b := r.start
		if b.timed == 0 {
			fmt.Fprintf(w, "- %s: no pod with all four times\n", r.agent)
			continue
		}
		s := b.medianPodStages
		fmt.Fprintf(w, "- %s: median pod %s: %s + %s + %s = %s; %d of the pods timed; first request: %s\n", r.agent, b.medianPod,
			sec(s.toFirstRequest), sec(s.toRunningPatch), sec(s.toSeen), sec(s.total), b.timed, breakdown(b.firstKinds))
	}
}

func find(results []*result, agent string) *result {
	for _, r := range results {
		if r.agent == agent {
			return r
		}
	}
	return nil
}

// goroutinesPerPod is what the pods added to the agent's goroutines, per
// pod; -1 when either count is unknown.
func goroutinesPerPod(r *result, pods int) float64 {
	if r.goroutines0 < 0 || r.goroutinesN < 0 {
		return -1
	}
	return float64(r.goroutinesN-r.goroutines0) / float64(pods)
}

// format writes v with its unit; a negative value is one not measured: –.
func format(v float64, unit string, prec int) string {
	if v < 0 {
		return "–"
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if unit != "" {
		s += " " + unit
	}
	return s
}

func ratioCell(a, b float64) string {
	if a < 0 || b < 0 {
		return "–"
	}
	if b == 0 {
		if a == 0 {
			return "1.00"
		}
		return "–"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64)
}

// breakdown lists request kinds, most frequent first.
func breakdown(byKind map[string]int) string {
	if len(byKind) == 0 {
		return "none"
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(byKind[b], byKind[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", byKind[k], k)
	}
	return strings.Join(parts, ", ")
}
