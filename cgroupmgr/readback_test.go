package cgroupmgr

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
)

// readback is a ResourceConfig's CPU and memory fields, "nil" where unset.
func readback(rc *ResourceConfig) [4]string {
	u := func(p *uint64) string {
		if p == nil {
			return "nil"
		}
		return formatUint(*p)
	}
	i := func(p *int64) string {
		if p == nil {
			return "nil"
		}
		return formatInt(*p)
	}
	return [4]string{u(rc.CPUShares), i(rc.CPUQuota), u(rc.CPUPeriod), i(rc.Memory)}
}

// TestReadPodCgroup reads back what EnsurePod wrote, on v1 and v2, and
// the kernel's unlimited values of a Burstable pod's cgroup.
func TestReadPodCgroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version Version
		pod     *v1.Pod
		// seed are files of the pod cgroup written before EnsurePod, as
		// the kernel creates them.
		seed map[string]string
		want [4]string
	}{
		{name: "v1 guaranteed", version: V1, pod: guaranteedPod,
			// 1 CPU: 1024 shares, 100ms of every 100ms; 256Mi.
			want: [4]string{"1024", "100000", "100000", "268435456"}},
		{name: "v2 guaranteed", version: V2, pod: guaranteedPod,
			// cpu.weight 39 reads back as 998 shares, as upstream.
			want: [4]string{"998", "100000", "100000", "268435456"}},
		{name: "v1 burstable unlimited", version: V1, pod: burstableOther,
			seed: map[string]string{
				"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000",
				"memory/memory.limit_in_bytes": "9223372036854771712",
			},
			// v1's unlimited memory is kept as read, as upstream.
			want: [4]string{"512", "-1", "100000", "9223372036854771712"}},
		{name: "v2 burstable unlimited", version: V2, pod: burstableOther,
			seed: map[string]string{"cpu.max": "max 100000", "memory.max": "max"},
			// 512 shares are weight 20, read back as 500 shares.
			want: [4]string{"500", "-1", "100000", "-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			root := fakeV1Root(t)
			if tc.version == V2 {
				root = fakeV2Root(t)
			}
			cfg := nodeConfig(root, &killRecorder{})
			cfg.Version = tc.version
			m, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
			name, _ := m.PodCgroupName(tc.pod)
			for f, v := range tc.seed {
				if tc.version == V1 {
					h, file, _ := strings.Cut(f, "/")
					writeT(t, filepath.Join(root, h, name.ToCgroupfs(), file), v)
				} else {
					writeT(t, filepath.Join(root, name.ToCgroupfs(), f), v)
				}
			}
			if _, err := m.EnsurePod(ctx, tc.pod); err != nil {
				t.Fatal(err)
			}
			rc, err := m.ReadPodCgroup(ctx, tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if got := readback(rc); got != tc.want {
				t.Errorf("ReadPodCgroup = %v (shares, quota, period, memory), want %v", got, tc.want)
			}
		})
	}
}

// TestReadPodCgroupPartial: a part that cannot be read is nil and named
// in the error; the other part is still read.
func TestReadPodCgroupPartial(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV2Root(t)
	cfg := nodeConfig(root, &killRecorder{})
	cfg.Version = V2
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadPodCgroup(ctx, guaranteedPod); err == nil || !strings.Contains(err.Error(), "Start") {
		t.Fatalf("ReadPodCgroup before Start: %v", err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// A Burstable pod without memory limit gets no memory.max written.
	pod := podWith("b-3", res(rl("cpu", "100m", "memory", "64Mi"), rl("cpu", "200m")))
	if _, err := m.EnsurePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	rc, err := m.ReadPodCgroup(ctx, pod)
	if err == nil || !strings.Contains(err.Error(), "memory limit") || strings.Contains(err.Error(), "cpu limits") {
		t.Errorf("ReadPodCgroup error = %v, want one about the memory limit only", err)
	}
	// 100m: 102 shares, weight 4, read back as 80 shares; 200m: 20ms.
	if got, want := readback(rc), [4]string{"80", "20000", "100000", "nil"}; got != want {
		t.Errorf("ReadPodCgroup = %v, want %v", got, want)
	}
}

// TestReadConfigSystemdLayout reads a cgroup back from where the systemd
// driver's files are: the nested slices.
func TestReadConfigSystemdLayout(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV1Root(t)
	d, err := newFSDriver(root, V1, (&killRecorder{}).kill, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.layout = func(n CgroupName) []string { return systemdLayout(nil, n) }
	name := CgroupName{"kubepods", "burstable", "pod12_34"}
	rc := ResourceConfigForPod(podWith("12-34", res(rl("cpu", "250m"), rl("cpu", "500m", "memory", "1Gi"))), true, QuotaPeriod)
	if err := d.Apply(ctx, name, rc); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(root, "cpu", "kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-pod12_34.slice", "cpu.shares")) {
		t.Fatal("the slice's cpu.shares was not written where systemd keeps it")
	}
	got, err := d.ReadConfig(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if r, want := readback(got), [4]string{"256", "50000", "100000", formatInt(gi)}; r != want {
		t.Errorf("ReadConfig = %v, want %v", r, want)
	}
}

func TestCPUWeightToShares(t *testing.T) {
	for shares, back := range map[uint64]uint64{2: 2, 1024: 998, 512: 500, 102: 80, MaxShares: MaxShares} {
		if got := CPUWeightToShares(CPUSharesToWeight(shares)); got != back {
			t.Errorf("CPUWeightToShares(CPUSharesToWeight(%d)) = %d, want %d", shares, got, back)
		}
	}
}

func formatUint(v uint64) string { return strconv.FormatUint(v, 10) }
func formatInt(v int64) string   { return strconv.FormatInt(v, 10) }
