package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// report is one report directory read back: its run.json and specs.txt.
type report struct {
	dir   string
	info  runInfo
	specs map[string]string
}

func readRun(dir string) (report, error) {
	info, err := readRunInfo(dir)
	if err != nil {
		return report{}, err
	}
	specs, err := readSpecs(filepath.Join(dir, "specs.txt"))
	if err != nil {
		return report{}, err
	}
	// The skipped count of a run.json written before the report left out
	// the specs the run did not select counts those too; passed and
	// failed must agree.
	p, f, _ := count(specs)
	if p != info.Passed || f != info.Failed {
		return report{}, fmt.Errorf("%s: run.json counts %d passed, %d failed; specs.txt %d, %d", dir,
			info.Passed, info.Failed, p, f)
	}
	return report{dir: dir, info: info, specs: specs}, nil
}

// table writes the README's markdown for the runs in dirs: one row per
// run (agent, runtime, spec set, commit, start, duration, counts, and the
// specs another run of the same set and runtime passed and this one did
// not), then every failed spec with the runs it failed in. Runs whose
// commit had uncommitted changes are refused: the table must name what
// ran.
func table(w io.Writer, dirs []string) error {
	runs := make([]report, 0, len(dirs))
	for _, d := range dirs {
		r, err := readRun(d)
		if err != nil {
			return err
		}
		if r.info.Dirty {
			return fmt.Errorf("%s: the run's checkout %.7s had uncommitted changes", d, r.info.Commit)
		}
		runs = append(runs, r)
	}
	fmt.Fprintln(w, "| agent | runtime | specs | commit | started (UTC) | ginkgo | passed | failed | skipped | passed only by the other agent |")
	fmt.Fprintln(w, "|---|---|---|---|---|--:|--:|--:|--:|--:|")
	for _, r := range runs {
		passed, failed, skipped := count(r.specs)
		fmt.Fprintf(w, "| %s | %s | %s | `%.7s` | %s | %s | %d | %d | %d | %s |\n",
			r.info.Agent, runtimeName(r.info), setName(r.info), r.info.Commit,
			r.info.Started.UTC().Format("2006-01-02 15:04"),
			r.info.Finished.Sub(r.info.Started).Round(time.Second),
			passed, failed, skipped, othersOnly(r, runs))
	}
	writeFailures(w, runs)
	return nil
}

func runtimeName(ri runInfo) string {
	if ri.RuntimeVersion != "" {
		return "containerd " + ri.RuntimeVersion
	}
	return "containerd " + ri.Containerd
}

func setName(ri runInfo) string {
	name := map[string]string{"": "non-gated", "features": "non-gated + gated (on by default)",
		"gated": "gated (on by default)"}[ri.Set]
	if name == "" {
		name = ri.Set
	}
	if ri.Focus != "" {
		name += ", focus `" + ri.Focus + "`"
	}
	return name
}

// othersOnly counts the specs that another agent's run of the same set,
// focus and containerd passed and r did not; "—" when there is no such run.
func othersOnly(r report, runs []report) string {
	var parts []string
	for _, o := range runs {
		if o.dir == r.dir || o.info.Agent == r.info.Agent || o.info.Set != r.info.Set ||
			o.info.Focus != r.info.Focus || o.info.Containerd != r.info.Containerd {
			continue
		}
		n := 0
		for name, res := range o.specs {
			if res == resultPassed && r.specs[name] != resultPassed {
				n++
			}
		}
		parts = append(parts, fmt.Sprintf("%d (%s)", n, o.info.Agent))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

// writeFailures lists each failed spec once with the agents that failed it.
func writeFailures(w io.Writer, runs []report) {
	failedBy := map[string][]string{}
	for _, r := range runs {
		for name, res := range r.specs {
			if res == resultFailed {
				failedBy[name] = append(failedBy[name], r.info.Agent+" "+runtimeName(r.info))
			}
		}
	}
	if len(failedBy) == 0 {
		return
	}
	names := make([]string, 0, len(failedBy))
	for n := range failedBy {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "\nFailed specs (%d):\n\n", len(names))
	for _, n := range names {
		by := failedBy[n]
		sort.Strings(by)
		fmt.Fprintf(w, "- %s — %s\n", strings.ReplaceAll(shortName(n), "|", "\\|"), strings.Join(by, "; "))
	}
}

// shortName is a JUnit spec name without ginkgo's "[It] " and the list of
// labels it appends ("[sig-node, Slow, NodeConformance, ...]").
func shortName(name string) string {
	name = strings.TrimPrefix(name, "[It] ")
	if i := strings.LastIndex(name, " ["); i >= 0 && strings.HasSuffix(name, "]") && strings.Contains(name[i:], ", ") {
		name = name[:i]
	}
	return name
}
