package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const junit = `<?xml version="1.0"?>
<testsuites><testsuite name="Kubernetes e2e suite">
<testcase name="[SynchronizedBeforeSuite]"></testcase>
<testcase name="[sig-node] A passes"></testcase>
<testcase name="[sig-node] B fails"><failure message="x"></failure></testcase>
<testcase name="[sig-node] C is skipped"><skipped message="skipped - no dummy link"></skipped></testcase>
<testcase name="[sig-node] N not selected"><skipped message="skipped"></skipped></testcase>
<testcase name="[sig-node] D passes"></testcase>
</testsuite></testsuites>`

// A JUnit report becomes a sorted specs.txt that reads back the same, and
// compare names the specs the second run passed and the first did not.
func TestSpecsAndCompare(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, d := range []string{a, b} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(a, "junit.xml"), []byte(junit), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := readJUnit(filepath.Join(a, "junit.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if p, f, s := count(specs); p != 2 || f != 1 || s != 1 {
		t.Fatalf("counts %d/%d/%d, want 2 passed, 1 failed, 1 skipped (suite nodes and specs the run did not select left out)", p, f, s)
	}
	if err := writeSpecs(filepath.Join(a, "specs.txt"), specs); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(a, "specs.txt"))
	want := "passed\t[sig-node] A passes\nfailed\t[sig-node] B fails\nskipped\t[sig-node] C is skipped\npassed\t[sig-node] D passes\n"
	if string(got) != want {
		t.Fatalf("specs.txt:\n%s\nwant:\n%s", got, want)
	}
	other := "passed\t[sig-node] A passes\npassed\t[sig-node] B fails\npassed\t[sig-node] E only here\nfailed\t[sig-node] D passes\n"
	if err := os.WriteFile(filepath.Join(b, "specs.txt"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := compare(&out, a, b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"passed by " + b + " and not by " + a + ": 2", "failed\t[sig-node] B fails", "not run\t[sig-node] E only here"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("compare output lacks %q:\n%s", line, out.String())
		}
	}
	if strings.Contains(out.String(), "A passes") {
		t.Errorf("a spec both runs passed is listed:\n%s", out.String())
	}
	if err := os.WriteFile(filepath.Join(b, "specs.txt"), []byte("bogus line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := compare(&out, a, b); err == nil || !strings.Contains(err.Error(), "specs.txt:1") {
		t.Errorf("a malformed specs.txt: %v, want an error naming its line", err)
	}
}

func TestReportName(t *testing.T) {
	if got := reportName("kubelet", "2", "features"); got != "kubelet-containerd2-features" {
		t.Errorf("reportName = %q", got)
	}
	if got := reportName("kubelet", "2", "gated"); got != "kubelet-containerd2-gated" {
		t.Errorf("reportName = %q", got)
	}
	if got := reportName("fullagent", "1.6", ""); got != "fullagent-containerd1.6" {
		t.Errorf("reportName = %q", got)
	}
}

// The flags choose the spec set, and each set its label filter:
// --gated-only is the --features filter narrowed to the FeatureGate-labelled
// specs, and the two flags together are refused; --serial selects the
// Serial specs the other sets leave out, with the same other exclusions.
func TestSpecSetFilter(t *testing.T) {
	for _, tc := range []struct {
		o         options
		set, want string
	}{
		{options{}, "", labelFilter},
		{options{features: true}, "features", featuresFilter},
		{options{gatedOnly: true}, "gated", "(" + featuresFilter + ") && /FeatureGate:/"},
		{options{serial: true}, "serial", strings.Replace(labelFilter, "!Serial", "Serial", 1)},
		{options{serial: true, features: true}, "serial-features", strings.Replace(featuresFilter, "!Serial", "Serial", 1)},
	} {
		set, err := tc.o.specSet()
		if err != nil || set != tc.set {
			t.Errorf("%+v: set %q, %v; want %q", tc.o, set, err, tc.set)
		}
		if got := filterFor(set); got != tc.want {
			t.Errorf("filterFor(%q) = %q, want %q", set, got, tc.want)
		}
	}
	if !strings.Contains(labelFilter, "!/FeatureGate:/") || strings.Contains(featuresFilter, "FeatureGate") {
		t.Errorf("the default filter must keep gated specs out and --features let them in")
	}
	for _, f := range []string{"!Alpha", "!BetaOffByDefault", "!/^Feature:/", "!Serial"} {
		if !strings.Contains(gatedFilter, f) {
			t.Errorf("gatedFilter %q lacks %q", gatedFilter, f)
		}
	}
	if _, err := (options{gatedOnly: true, features: true}).specSet(); err == nil {
		t.Error("--gated-only with --features accepted")
	}
	if _, err := (options{gatedOnly: true, serial: true}).specSet(); err == nil {
		t.Error("--gated-only with --serial accepted")
	}
	for set, want := range map[string]bool{"": false, "features": false, "gated": false, "serial": true, "serial-features": true} {
		if isSerial(set) != want {
			t.Errorf("isSerial(%q) = %v, want %v", set, !want, want)
		}
	}
}
