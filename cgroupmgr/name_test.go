package cgroupmgr

import (
	"reflect"
	"testing"
)

func TestCgroupNames(t *testing.T) {
	cases := []struct {
		name     CgroupName
		cgroupfs string
		systemd  string
	}{
		{CgroupName{}, "/", "/"},
		{CgroupName{"kubepods"}, "/kubepods", "/kubepods.slice"},
		{CgroupName{"kubepods", "burstable"}, "/kubepods/burstable", "/kubepods.slice/kubepods-burstable.slice"},
		{CgroupName{"kubepods", "besteffort"}, "/kubepods/besteffort", "/kubepods.slice/kubepods-besteffort.slice"},
		{CgroupName{"kubepods", "burstable", "pod1234-abcd-5678-efgh"}, "/kubepods/burstable/pod1234-abcd-5678-efgh",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice"},
		{CgroupName{"kubepods", "pod6b1a3c1e-7f2d-4f5e-9c8a-0d1e2f3a4b5c"}, "/kubepods/pod6b1a3c1e-7f2d-4f5e-9c8a-0d1e2f3a4b5c",
			"/kubepods.slice/kubepods-pod6b1a3c1e_7f2d_4f5e_9c8a_0d1e2f3a4b5c.slice"},
		{CgroupName{"nodekit-test-1", "kubepods", "burstable", "podx"}, "/nodekit-test-1/kubepods/burstable/podx",
			"/nodekit_test_1.slice/nodekit_test_1-kubepods.slice/nodekit_test_1-kubepods-burstable.slice/nodekit_test_1-kubepods-burstable-podx.slice"},
	}
	for _, tc := range cases {
		if got := tc.name.ToCgroupfs(); got != tc.cgroupfs {
			t.Errorf("%q.ToCgroupfs() = %q, want %q", tc.name, got, tc.cgroupfs)
		}
		if got := tc.name.ToSystemd(); got != tc.systemd {
			t.Errorf("%q.ToSystemd() = %q, want %q", tc.name, got, tc.systemd)
		}
		if got := ParseCgroupfs(tc.cgroupfs); !reflect.DeepEqual(got, tc.name) {
			t.Errorf("ParseCgroupfs(%q) = %q, want %q", tc.cgroupfs, got, tc.name)
		}
		if got := ParseSystemd(tc.systemd); !reflect.DeepEqual(got, tc.name) {
			t.Errorf("ParseSystemd(%q) = %q, want %q", tc.systemd, got, tc.name)
		}
		if got := literalName(DriverSystemd, tc.name); got != tc.systemd {
			t.Errorf("systemd literal of %q = %q", tc.name, got)
		}
		if got := literalName(DriverCgroupfs, tc.name); got != tc.cgroupfs {
			t.Errorf("cgroupfs literal of %q = %q", tc.name, got)
		}
	}
}

func TestParseCgroupfsForms(t *testing.T) {
	for in, want := range map[string]CgroupName{
		"":                {},
		"/":               {},
		"//a//b/":         {"a", "b"},
		"a/b":             {"a", "b"},
		"/kubepods.slice": {"kubepods.slice"},
	} {
		if got := ParseCgroupfs(in); !reflect.DeepEqual(got, want) {
			t.Errorf("ParseCgroupfs(%q) = %q, want %q", in, got, want)
		}
	}
	if got := ParseSystemd("kubepods-burstable-pod12_34.slice"); !reflect.DeepEqual(got, CgroupName{"kubepods", "burstable", "pod12-34"}) {
		t.Errorf("ParseSystemd of a unit name = %q", got)
	}
	if got := ParseSystemd("-.slice"); len(got) != 0 {
		t.Errorf("ParseSystemd(-.slice) = %q, want the root", got)
	}
}

func TestNewCgroupName(t *testing.T) {
	base := CgroupName{"kubepods"}
	got, err := NewCgroupName(base, "burstable", "pod1")
	if err != nil || !reflect.DeepEqual(got, CgroupName{"kubepods", "burstable", "pod1"}) {
		t.Fatalf("NewCgroupName = %q, %v", got, err)
	}
	// base is not aliased.
	if _, err := NewCgroupName(got[:1], "x"); err != nil || got[1] != "burstable" {
		t.Fatalf("NewCgroupName wrote into its base: %q", got)
	}
	for _, bad := range []string{"a_b", "a/b", ""} {
		if _, err := NewCgroupName(base, bad); err == nil {
			t.Errorf("component %q accepted", bad)
		}
	}
}
