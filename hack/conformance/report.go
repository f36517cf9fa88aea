package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Spec results as specs.txt spells them.
const (
	resultPassed  = "passed"
	resultFailed  = "failed"
	resultSkipped = "skipped"
)

// reportName is a run's report directory under --out: the agent, the
// containerd it ran on, and the spec set ("features" for a run with the
// feature-gated specs, "gated" for only those) when not the default, so
// that runs of both agents on both runtimes sit side by side.
func reportName(agent, containerd, set string) string {
	name := agent + "-containerd" + containerd
	if set != "" {
		name += "-" + set
	}
	return name
}

type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string `xml:"name,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct{} `xml:"failure"`
			Error   *struct{} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// notSelected is the skip message ginkgo's JUnit report gives every spec
// the label filter, focus or skip left out; a spec skipped while it ran
// says "skipped - " and why.
const notSelected = "skipped"

// readJUnit returns each spec's result from ginkgo's JUnit report, by spec
// name; the suite's set-up and reporting nodes and the specs the run did
// not select are left out.
func readJUnit(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s junitSuites
	if err := xml.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	specs := map[string]string{}
	for _, suite := range s.Suites {
		for _, c := range suite.Cases {
			if strings.HasPrefix(c.Name, "[") && strings.Contains(c.Name, "Suite") {
				continue
			}
			switch {
			case c.Skipped != nil && c.Skipped.Message == notSelected:
				continue
			case c.Skipped != nil:
				specs[c.Name] = resultSkipped
			case c.Failure != nil || c.Error != nil:
				specs[c.Name] = resultFailed
			default:
				specs[c.Name] = resultPassed
			}
		}
	}
	return specs, nil
}

func count(specs map[string]string) (passed, failed, skipped int) {
	for _, r := range specs {
		switch r {
		case resultPassed:
			passed++
		case resultFailed:
			failed++
		default:
			skipped++
		}
	}
	return passed, failed, skipped
}

// writeSpecs writes one "result<TAB>spec" line per spec, sorted by spec.
func writeSpecs(path string, specs map[string]string) error {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s\t%s\n", specs[n], n)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// readSpecs reads a specs.txt written by writeSpecs.
func readSpecs(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	specs := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		result, name, ok := strings.Cut(sc.Text(), "\t")
		if !ok || (result != resultPassed && result != resultFailed && result != resultSkipped) {
			return nil, fmt.Errorf("%s:%d: want \"passed|failed|skipped<TAB>spec\", got %q", path, n, sc.Text())
		}
		specs[name] = result
	}
	return specs, sc.Err()
}

// compare prints both runs' counts and every spec that run b passed and
// run a did not (failed, skipped or not run), sorted; no such spec is the
// "a passes whatever b passes" of the README.
func compare(w io.Writer, a, b string) error {
	ra, err := readSpecs(a + "/specs.txt")
	if err != nil {
		return err
	}
	rb, err := readSpecs(b + "/specs.txt")
	if err != nil {
		return err
	}
	for _, r := range []struct {
		dir   string
		specs map[string]string
	}{{a, ra}, {b, rb}} {
		p, f, s := count(r.specs)
		fmt.Fprintf(w, "%s: %d passed, %d failed, %d skipped\n", r.dir, p, f, s)
	}
	var missing []string
	for name, result := range rb {
		if result == resultPassed && ra[name] != resultPassed {
			got := ra[name]
			if got == "" {
				got = "not run"
			}
			missing = append(missing, got+"\t"+name)
		}
	}
	sort.Slice(missing, func(i, j int) bool {
		return strings.SplitN(missing[i], "\t", 2)[1] < strings.SplitN(missing[j], "\t", 2)[1]
	})
	fmt.Fprintf(w, "passed by %s and not by %s: %d\n", b, a, len(missing))
	for _, m := range missing {
		fmt.Fprintln(w, m)
	}
	return nil
}

// rescan rewrites dir's specs.txt from its junit.xml with readJUnit.
func rescan(dir string) error {
	specs, err := readJUnit(filepath.Join(dir, "junit.xml"))
	if err != nil {
		return err
	}
	return writeSpecs(filepath.Join(dir, "specs.txt"), specs)
}
