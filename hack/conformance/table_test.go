package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeRun writes a report directory with specs and a run.json to match.
func writeRun(t *testing.T, dir string, ri runInfo, specs map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeSpecs(filepath.Join(dir, "specs.txt"), specs); err != nil {
		t.Fatal(err)
	}
	ri.Passed, ri.Failed, ri.Skipped = count(specs)
	if err := writeRunInfo(dir, ri); err != nil {
		t.Fatal(err)
	}
}

// The table has a row per run with its commit, start, duration and counts,
// the specs the other agent's run passed and this one did not, and each
// failed spec with the runs that failed it; a run of a dirty checkout or
// one whose run.json disagrees with its specs.txt is refused.
func TestTable(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 5, 11, 0, 0, 0, time.UTC)
	base := runInfo{Containerd: "2", RuntimeVersion: "v2.4.2", Set: "features", Procs: 6,
		Commit: "0123456789abcdef", Started: start, Finished: start.Add(61 * time.Minute)}
	fa, kl := base, base
	fa.Agent, kl.Agent = "fullagent", "kubelet"
	writeRun(t, filepath.Join(dir, "fa"), fa, map[string]string{
		"[sig-node] A": resultPassed, "[sig-node] B | pipe": resultFailed, "[It] [sig-node] C [sig-node, Slow]": resultFailed})
	writeRun(t, filepath.Join(dir, "kl"), kl, map[string]string{
		"[sig-node] A": resultPassed, "[sig-node] B | pipe": resultFailed, "[It] [sig-node] C [sig-node, Slow]": resultPassed})
	var b strings.Builder
	if err := table(&b, []string{filepath.Join(dir, "fa"), filepath.Join(dir, "kl")}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| fullagent | containerd v2.4.2 | non-gated + gated (on by default) | `0123456` | 2026-12-05 11:00 | 1h1m0s | 1 | 2 | 0 | 1 (kubelet) |",
		"| kubelet | containerd v2.4.2 | non-gated + gated (on by default) | `0123456` | 2026-12-05 11:00 | 1h1m0s | 2 | 1 | 0 | 0 (fullagent) |",
		"Failed specs (2):",
		"- [sig-node] B \\| pipe — fullagent containerd v2.4.2; kubelet containerd v2.4.2",
		"- [sig-node] C — fullagent containerd v2.4.2",
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("table lacks line %q:\n%s", want, b.String())
		}
	}

	dirty := fa
	dirty.Dirty = true
	writeRun(t, filepath.Join(dir, "dirty"), dirty, map[string]string{"[sig-node] A": resultPassed})
	if err := table(&b, []string{filepath.Join(dir, "dirty")}); err == nil || !strings.Contains(err.Error(), "uncommitted") {
		t.Errorf("a run of a dirty checkout: %v, want it refused", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fa", "specs.txt"), []byte("passed\t[sig-node] A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := table(&b, []string{filepath.Join(dir, "fa")}); err == nil || !strings.Contains(err.Error(), "counts") {
		t.Errorf("run.json and specs.txt disagreeing: %v, want an error", err)
	}
}

const (
	tableBegin = "<!-- conformance table:"
	tableEnd   = "<!-- end conformance table -->"
)

// TestReadmeTables regenerates every conformance table of the README from
// the runs it names (report directories kept under hack/conformance/results)
// and fails where the README says something else.
func TestReadmeTables(t *testing.T) {
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dirs []string
	var body strings.Builder
	in, tables := false, 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, tableBegin):
			dirs = strings.Fields(strings.TrimSuffix(strings.TrimPrefix(line, tableBegin), "-->"))
			in = true
			body.Reset()
		case in && line == tableEnd:
			in = false
			tables++
			var want strings.Builder
			fromHere := make([]string, len(dirs))
			for i, d := range dirs {
				fromHere[i] = filepath.Join("..", "..", d) // the names are relative to the repository root
			}
			if err := table(&want, fromHere); err != nil {
				t.Fatalf("README.md:%d: %v", n, err)
			}
			if got := strings.TrimSpace(body.String()); got != strings.TrimSpace(want.String()) {
				t.Errorf("README.md table ending at line %d is not what `go run ./hack/conformance table %s` prints:\n%s",
					n, strings.Join(dirs, " "), want.String())
			}
		case in:
			body.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if in {
		t.Fatalf("README.md: a %q has no %q", tableBegin, tableEnd)
	}
	if tables == 0 {
		t.Fatal("README.md has no conformance table: the headline run must be one")
	}
}
