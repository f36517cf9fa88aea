package main

import (
	"strings"
	"testing"
)

// --dra is a set of its own: its filter, its report name, Serial ones only
// with --serial (in one process, without the image registry), containerd 2
// only.
func TestDRASpecSet(t *testing.T) {
	for _, tc := range []struct {
		o             options
		set, filter   string
		serial, needR bool
	}{
		{options{dra: true}, "dra", draFilter, false, false},
		{options{dra: true, serial: true}, "dra-serial", draSerialFilter, true, false},
	} {
		set, err := tc.o.specSet()
		if err != nil || set != tc.set {
			t.Fatalf("%+v: set %q, %v; want %q", tc.o, set, err, tc.set)
		}
		if got := filterFor(set); got != tc.filter {
			t.Errorf("filterFor(%q) = %q, want %q", set, got, tc.filter)
		}
		if isSerial(set) != tc.serial || needsRegistry(set) != tc.needR || !isDRA(set) {
			t.Errorf("%q: serial %v, registry %v, dra %v", set, isSerial(set), needsRegistry(set), isDRA(set))
		}
		if name := reportName("fullagent", "2", set); name != "fullagent-containerd2-"+tc.set {
			t.Errorf("report name %q", name)
		}
	}
	for _, f := range []string{"DRA && sig-node && ", "!Alpha", "!BetaOffByDefault", "!/^Feature:OffByDefault$/", "!Flaky", "!Disruptive", "!Serial"} {
		if !strings.Contains(draFilter, f) {
			t.Errorf("draFilter %q lacks %q", draFilter, f)
		}
		if want := strings.Replace(f, "!Serial", "&& Serial", 1); !strings.Contains(draSerialFilter, want) {
			t.Errorf("draSerialFilter %q lacks %q", draSerialFilter, want)
		}
	}
	for _, o := range []options{{dra: true, features: true}, {dra: true, gatedOnly: true}} {
		if _, err := o.specSet(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	for _, set := range []string{"", "features", "gated", "serial", "serial-features"} {
		if isDRA(set) {
			t.Errorf("isDRA(%q)", set)
		}
	}
	if !needsRegistry("serial") || !needsRegistry("serial-features") {
		t.Error("the Serial NodeConformance sets need the registry")
	}
	if got := apiServerArgs("dra"); len(got) != 1 || !strings.Contains(got[0], "resource.k8s.io/v1beta1=true") || !strings.Contains(got[0], "resource.k8s.io/v1beta2=true") {
		t.Errorf("apiServerArgs(dra) = %q, want the beta resource.k8s.io versions on", got)
	}
	if got := apiServerArgs(""); got != nil {
		t.Errorf("apiServerArgs of the default set = %q, want none", got)
	}
	if err := checkDRA("dra", "1.6"); err == nil || !strings.Contains(err.Error(), "CDI") {
		t.Errorf("--dra on containerd 1.6: %v, want a refusal naming CDI", err)
	}
	if err := checkDRA("dra", "2"); err != nil {
		t.Errorf("--dra on containerd 2: %v", err)
	}
	if err := checkDRA("", "1.6"); err != nil {
		t.Errorf("the default set on containerd 1.6: %v", err)
	}
}
