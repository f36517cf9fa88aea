package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// machine describes where the bench ran.
type machine struct {
	os, cpu, kernel, containerd string
	cpus                        int
	memGiB                      float64
	date                        time.Time
}

func describeMachine(ctx context.Context) machine {
	m := machine{cpus: runtime.NumCPU(), date: time.Now().UTC(), os: "Linux", cpu: "unknown CPU", containerd: "containerd (version unknown)"}
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
	// "containerd github.com/containerd/containerd 1.6.20~ds1 ..."
	if out, err := exec.CommandContext(ctx, "containerd", "--version").Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) >= 3 {
			v, _, _ := strings.Cut(f[2], "~")
			m.containerd = "containerd " + v
		}
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
		{"API requests during the burst", func(r *result) float64 { return float64(r.burstRequests) }, "", 0},
		{fmt.Sprintf("API requests/min, steady, %d pods", o.pods), func(r *result) float64 { return r.steadyPerMinute() }, "", 1},
	}
}

// printReport writes the machine, the workload and the table in Markdown.
func printReport(w io.Writer, m machine, o options, kubeletVersion string, results []*result) {
	fmt.Fprintf(w, "\nMachine: %s, %d CPUs (%s), %.1f GiB RAM, kernel %s, %s, cgroup v1\n", m.os, m.cpus, m.cpu, m.memGiB, m.kernel, m.containerd)
	fmt.Fprintf(w, "Date: %s\n", m.date.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Workload: %d busybox pods (`sleep 3600`, image preloaded, imagePullPolicy IfNotPresent) created at once on a Ready node; "+
		"fresh etcd + kube-apiserver and containerd per agent; steady window %v, starting %v after the last pod runs\n\n", o.pods, o.steady, settleSteady)

	header := []string{"figure"}
	for _, r := range results {
		name := r.agent
		if r.agent == agentKubelet && kubeletVersion != "" {
			name += " " + kubeletVersion
		}
		header = append(header, name)
	}
	full, kube := find(results, agentFull), find(results, agentKubelet)
	ratio := full != nil && kube != nil
	if ratio {
		header = append(header, "fullagent/kubelet")
	}
	fmt.Fprintf(w, "| %s |\n|---%s|\n", strings.Join(header, " | "), strings.Repeat("|--:", len(header)-1))
	for _, rw := range rows(o) {
		cells := []string{rw.name}
		for _, r := range results {
			cells = append(cells, format(rw.value(r), rw.unit, rw.prec))
		}
		if ratio {
			cells = append(cells, ratioCell(rw.value(full), rw.value(kube)))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintf(w, "\nAPI requests in the steady window (%v), by verb and resource:\n", o.steady)
	for _, r := range results {
		fmt.Fprintf(w, "- %s: %s\n", r.agent, breakdown(r.steadyByKind))
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

func format(v float64, unit string, prec int) string {
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if unit != "" {
		s += " " + unit
	}
	return s
}

func ratioCell(a, b float64) string {
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
