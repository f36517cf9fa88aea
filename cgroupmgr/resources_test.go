package cgroupmgr

import (
	"fmt"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestConversions(t *testing.T) {
	for _, tc := range []struct {
		milli  int64
		shares uint64
		quota  int64
	}{
		{0, 2, 0}, {1, 2, 1000}, {5, 5, 1000}, {10, 10, 1000}, {100, 102, 10000},
		{250, 256, 25000}, {1000, 1024, 100000}, {1500, 1536, 150000},
		{256000, 262144, 25600000}, {300000, 262144, 30000000},
	} {
		if got := MilliCPUToShares(tc.milli); got != tc.shares {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tc.milli, got, tc.shares)
		}
		if got := MilliCPUToQuota(tc.milli, QuotaPeriod); got != tc.quota {
			t.Errorf("MilliCPUToQuota(%d) = %d, want %d", tc.milli, got, tc.quota)
		}
	}
	if got := MilliCPUToQuota(200, 5000); got != 1000 {
		t.Errorf("quota over a 5ms period = %d, want the 1ms minimum", got)
	}
	for shares, weight := range map[uint64]uint64{0: 1, 2: 1, 3: 1, 1024: 39, 2048: 79, 262143: 9999, 262144: 10000, 500000: 10000} {
		if got := CPUSharesToWeight(shares); got != weight {
			t.Errorf("CPUSharesToWeight(%d) = %d, want %d", shares, got, weight)
		}
	}
}

func TestHugePageLimits(t *testing.T) {
	got := HugePageLimits(rl("hugepages-2Mi", "100Mi", "hugepages-2048Ki", "4Mi", "hugepages-1Gi", "2Gi", "memory", "1Gi", "hugepages-bad", "1Gi"))
	want := map[int64]int64{2 * mi: 104 * mi, gi: 2 * gi}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("HugePageLimits = %v, want %v", got, want)
	}
	for size, unit := range map[int64]string{2 * mi: "2MB", gi: "1GB", 64 * 1024: "64KB", 16 * gi: "16GB"} {
		if got, err := hugePageUnit(size); err != nil || got != unit {
			t.Errorf("hugePageUnit(%d) = %q, %v, want %q", size, got, err, unit)
		}
	}
}

// cfg renders a ResourceConfig for comparison.
func cfgString(rc *ResourceConfig) string {
	s := func(p any) string {
		switch v := p.(type) {
		case *uint64:
			if v != nil {
				return fmt.Sprint(*v)
			}
		case *int64:
			if v != nil {
				return fmt.Sprint(*v)
			}
		}
		return "-"
	}
	return fmt.Sprintf("shares=%s quota=%s period=%s memory=%s pids=%s hugepages=%v",
		s(rc.CPUShares), s(rc.CPUQuota), s(rc.CPUPeriod), s(rc.Memory), s(rc.PidsLimit), rc.HugePageLimit)
}

func TestResourceConfigForPod(t *testing.T) {
	guaranteed := func(cpu, mem string) v1.ResourceRequirements {
		l := rl("cpu", cpu, "memory", mem)
		return res(l, l)
	}
	podLevel := func(r v1.ResourceRequirements) *v1.Pod {
		p := podWith("pl", v1.ResourceRequirements{}, v1.ResourceRequirements{})
		p.Spec.Resources = &r
		return p
	}
	withOverhead := podWith("oh", res(rl("cpu", "100m"), rl("memory", "100Mi")))
	withOverhead.Spec.Overhead = rl("cpu", "250m", "memory", "120Mi")
	huge := podWith("hp", res(rl("cpu", "1", "memory", "1Gi", "hugepages-2Mi", "100Mi"), rl("cpu", "1", "memory", "1Gi", "hugepages-2Mi", "100Mi")))

	cases := []struct {
		name    string
		pod     *v1.Pod
		enforce bool
		period  uint64
		want    string
	}{
		{"best effort", podWith("be", v1.ResourceRequirements{}), true, QuotaPeriod,
			"shares=2 quota=- period=- memory=- pids=- hugepages=map[]"},
		{"burstable, requests only", podWith("b1", res(rl("cpu", "100m", "memory", "64Mi"), nil)), true, QuotaPeriod,
			"shares=102 quota=- period=- memory=- pids=- hugepages=map[]"},
		{"burstable, memory limits on every container", podWith("b2",
			res(rl("cpu", "200m", "memory", "64Mi"), rl("memory", "128Mi")),
			res(rl("cpu", "300m"), rl("memory", "64Mi"))), true, QuotaPeriod,
			fmt.Sprintf("shares=512 quota=- period=- memory=%d pids=- hugepages=map[]", 192*mi)},
		{"burstable, limits on one container only", podWith("b3",
			res(rl("cpu", "200m"), rl("cpu", "500m", "memory", "128Mi")),
			res(rl("cpu", "300m"), nil)), true, QuotaPeriod,
			"shares=512 quota=- period=- memory=- pids=- hugepages=map[]"},
		{"burstable, cpu limits on every container", podWith("b4",
			res(rl("cpu", "100m"), rl("cpu", "500m")),
			res(rl("cpu", "100m"), rl("cpu", "1"))), true, QuotaPeriod,
			"shares=204 quota=150000 period=100000 memory=- pids=- hugepages=map[]"},
		{"burstable, cpu limits not enforced", podWith("b5", res(rl("cpu", "100m"), rl("cpu", "500m"))), false, QuotaPeriod,
			"shares=102 quota=-1 period=100000 memory=- pids=- hugepages=map[]"},
		{"guaranteed", podWith("g1", guaranteed("1", "1Gi")), true, QuotaPeriod,
			fmt.Sprintf("shares=1024 quota=100000 period=100000 memory=%d pids=- hugepages=map[]", gi)},
		{"guaranteed, cpu limits not enforced", podWith("g2", guaranteed("1", "1Gi")), false, QuotaPeriod,
			fmt.Sprintf("shares=1024 quota=-1 period=100000 memory=%d pids=- hugepages=map[]", gi)},
		{"guaranteed, 5ms period", podWith("g3", guaranteed("100m", "64Mi")), true, 5000,
			fmt.Sprintf("shares=102 quota=1000 period=5000 memory=%d pids=- hugepages=map[]", 64*mi)},
		{"init container larger than the app", withInit(podWith("i1", guaranteed("500m", "256Mi")), false, guaranteed("2", "1Gi")), true, QuotaPeriod,
			fmt.Sprintf("shares=2048 quota=200000 period=100000 memory=%d pids=- hugepages=map[]", gi)},
		{"sidecar adds to the app", withInit(podWith("s1", guaranteed("200m", "100Mi")), true, guaranteed("100m", "50Mi")), true, QuotaPeriod,
			fmt.Sprintf("shares=307 quota=30000 period=100000 memory=%d pids=- hugepages=map[]", 150*mi)},
		{"init after a sidecar adds to it", withInit(withInit(podWith("s2", guaranteed("200m", "100Mi")), true, guaranteed("100m", "50Mi")), false, guaranteed("1", "10Mi")), true, QuotaPeriod,
			fmt.Sprintf("shares=1126 quota=110000 period=100000 memory=%d pids=- hugepages=map[]", 150*mi)},
		{"overhead", withOverhead, true, QuotaPeriod,
			fmt.Sprintf("shares=358 quota=- period=- memory=%d pids=- hugepages=map[]", 220*mi)},
		{"huge pages", huge, true, QuotaPeriod,
			fmt.Sprintf("shares=1024 quota=100000 period=100000 memory=%d pids=- hugepages=map[%d:%d]", gi, 2*mi, 100*mi)},
		{"pod-level guaranteed", podLevel(guaranteed("1", "512Mi")), true, QuotaPeriod,
			fmt.Sprintf("shares=1024 quota=100000 period=100000 memory=%d pids=- hugepages=map[]", 512*mi)},
		{"pod-level burstable with a memory limit", podLevel(res(rl("cpu", "500m"), rl("memory", "1Gi"))), true, QuotaPeriod,
			fmt.Sprintf("shares=512 quota=- period=- memory=%d pids=- hugepages=map[]", gi)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := cfgString(ResourceConfigForPod(tc.pod, tc.enforce, tc.period)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
