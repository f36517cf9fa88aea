package cgroupmgr

import (
	"reflect"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

func propMap(props []sddbus.Property) map[string]any {
	out := map[string]any{}
	for _, p := range props {
		out[p.Name] = p.Value.Value()
	}
	return out
}

func TestSliceUnits(t *testing.T) {
	for _, tc := range []struct {
		name         CgroupName
		unit, parent string
	}{
		{CgroupName{"kubepods"}, "kubepods.slice", "-.slice"},
		{CgroupName{"kubepods", "burstable"}, "kubepods-burstable.slice", "kubepods.slice"},
		{CgroupName{"kubepods", "besteffort", "pod12-34"}, "kubepods-besteffort-pod12_34.slice", "kubepods-besteffort.slice"},
		{CgroupName{"kubepods", "pod12-34"}, "kubepods-pod12_34.slice", "kubepods.slice"},
	} {
		unit, parent := sliceUnits(tc.name)
		if unit != tc.unit || parent != tc.parent {
			t.Errorf("sliceUnits(%q) = %q, %q; want %q, %q", tc.name, unit, parent, tc.unit, tc.parent)
		}
	}
}

func TestSliceProperties(t *testing.T) {
	got := propMap(sliceProperties(CgroupName{"kubepods", "burstable"}, V1))
	want := map[string]any{
		"Description": "nodekit cgroup kubepods-burstable.slice", "Wants": []string{"kubepods.slice"},
		"MemoryAccounting": true, "CPUAccounting": true, "BlockIOAccounting": true, "TasksAccounting": true,
		"DefaultDependencies": false,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("v1 slice properties\n got %v\nwant %v", got, want)
	}
	got = propMap(sliceProperties(CgroupName{"kubepods"}, V2))
	if got["IOAccounting"] != true || got["BlockIOAccounting"] != nil || got["Delegate"] != nil {
		t.Errorf("v2 slice properties %v: want IOAccounting, no BlockIOAccounting, no Delegate", got)
	}
}

func TestResourceProperties(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name      string
		rc        ResourceConfig
		version   Version
		sdVersion int
		want      map[string]any
		wantQuota *int64
	}{
		{
			name: "v1 pod", version: V1, sdVersion: 252,
			rc:   ResourceConfig{CPUShares: u64(512), CPUQuota: i64(50000), CPUPeriod: u64(100000), Memory: i64(256 << 20), PidsLimit: i64(100)},
			want: map[string]any{"CPUShares": uint64(512), "CPUQuotaPeriodUSec": uint64(100000), "CPUQuotaPerSecUSec": uint64(500000), "MemoryLimit": uint64(256 << 20), "TasksMax": uint64(100)},
		},
		{
			name: "v2 pod", version: V2, sdVersion: 252,
			rc:   ResourceConfig{CPUShares: u64(512), Memory: i64(256 << 20)},
			want: map[string]any{"CPUWeight": CPUSharesToWeight(512), "MemoryMax": uint64(256 << 20)},
		},
		{
			// 1.5ms of 100ms is 15000us per second: systemd keeps
			// percent, so 20000us, and the files get 2000us.
			name: "quota rounded up to 1%", version: V1, sdVersion: 252,
			rc:   ResourceConfig{CPUQuota: i64(1500), CPUPeriod: u64(100000)},
			want: map[string]any{"CPUQuotaPeriodUSec": uint64(100000), "CPUQuotaPerSecUSec": uint64(20000)}, wantQuota: i64(2000),
		},
		{
			name: "unlimited", version: V1, sdVersion: 252,
			rc:   ResourceConfig{CPUQuota: i64(-1), CPUPeriod: u64(100000), Memory: i64(-1), PidsLimit: i64(-1)},
			want: map[string]any{"CPUQuotaPeriodUSec": uint64(100000), "CPUQuotaPerSecUSec": systemdInfinity, "MemoryLimit": systemdInfinity, "TasksMax": systemdInfinity},
		},
		{
			name: "no period property before systemd 242", version: V1, sdVersion: 241,
			rc:   ResourceConfig{CPUQuota: i64(20000), CPUPeriod: u64(100000)},
			want: map[string]any{"CPUQuotaPerSecUSec": uint64(200000)},
		},
		{
			name: "huge pages only: no property", version: V1, sdVersion: 252,
			rc:   ResourceConfig{HugePageLimit: map[int64]int64{2 << 20: 0}},
			want: map[string]any{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			props, files := resourceProperties(&tc.rc, tc.version, tc.sdVersion)
			if got := propMap(props); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("properties\n got %v\nwant %v", got, tc.want)
			}
			wantQuota := tc.rc.CPUQuota
			if tc.wantQuota != nil {
				wantQuota = tc.wantQuota
			}
			if !reflect.DeepEqual(files.CPUQuota, wantQuota) {
				t.Errorf("quota for the files %v, want %v", deref(files.CPUQuota), deref(wantQuota))
			}
		})
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestParseSystemdVersion(t *testing.T) {
	for in, want := range map[string]int{`"252.38-1~deb12u1"`: 252, `"257"`: 257, `""`: 0, `"v1"`: 0} {
		if got := parseSystemdVersion(in); got != want {
			t.Errorf("parseSystemdVersion(%s) = %d, want %d", in, got, want)
		}
	}
}

func TestSystemdLayoutOnFiles(t *testing.T) {
	root := fakeV1Root(t)
	d := &systemdDriver{}
	fsd, err := newFSDriver(root, V1, killProcess, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.fs = fsd
	base := ParseCgroupfs("/ns")
	fsd.layout = func(name CgroupName) []string { return systemdLayout(base, name) }
	burstable := CgroupName{"kubepods", "burstable"}
	if got := fsd.rel(append(burstable, "pod12-34")); got != "/ns/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice" {
		t.Errorf("rel = %q", got)
	}
	for _, dir := range []string{
		"memory/ns/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice/cri-containerd-1.scope",
		"pids/ns/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab.slice",
		"memory/ns/kubepods.slice/kubepods-burstable.slice/other.slice",
	} {
		mkdirAll(t, root+"/"+dir)
	}
	got, err := d.Children(t.Context(), burstable)
	if err != nil || !reflect.DeepEqual(got, []string{"pod12-34", "podab"}) {
		t.Errorf("Children = %q, %v; want the two pod slices", got, err)
	}
}
