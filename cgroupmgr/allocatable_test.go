package cgroupmgr

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestNodeAllocatable(t *testing.T) {
	capacity := rl("cpu", "4", "memory", "16Gi", "ephemeral-storage", "100Gi", "pods", "110", "pid", "4194304")
	cases := []struct {
		name                          string
		capacity, kube, system, evict v1.ResourceList
		kubepods, reservation, alloc  v1.ResourceList
		err                           string
	}{
		{
			name:     "nothing reserved",
			capacity: capacity,
			kubepods: capacity, reservation: v1.ResourceList{}, alloc: capacity,
		},
		{
			name:     "reserved and eviction",
			capacity: capacity,
			kube:     rl("cpu", "500m", "memory", "1Gi"),
			system:   rl("cpu", "250m", "memory", "512Mi", "pid", "1000"),
			evict:    rl("memory", "100Mi", "ephemeral-storage", "10Gi"),
			// kubepods: no eviction subtracted.
			kubepods:    rl("cpu", "3250m", "memory", "14848Mi", "ephemeral-storage", "100Gi", "pods", "110", "pid", "4193304"),
			reservation: rl("cpu", "750m", "memory", "1636Mi", "ephemeral-storage", "10Gi", "pid", "1000"),
			alloc:       rl("cpu", "3250m", "memory", "14748Mi", "ephemeral-storage", "90Gi", "pods", "110", "pid", "4193304"),
		},
		{
			name:        "reserved resources without capacity are ignored",
			capacity:    rl("cpu", "2"),
			kube:        rl("memory", "1Gi", "cpu", "1"),
			kubepods:    rl("cpu", "1"),
			reservation: rl("cpu", "1"),
			alloc:       rl("cpu", "1"),
		},
		{
			name:        "huge pages come off allocatable memory, not kubepods",
			capacity:    rl("memory", "8Gi", "hugepages-2Mi", "1Gi"),
			system:      rl("memory", "1Gi"),
			kubepods:    rl("memory", "7Gi", "hugepages-2Mi", "1Gi"),
			reservation: rl("memory", "1Gi"),
			alloc:       rl("memory", "6Gi", "hugepages-2Mi", "1Gi"),
		},
		{
			name:        "reservation above capacity",
			capacity:    rl("cpu", "1", "memory", "1Gi"),
			kube:        rl("cpu", "2"),
			evict:       rl("memory", "2Gi"),
			kubepods:    rl("cpu", "0", "memory", "1Gi"),
			reservation: rl("cpu", "2", "memory", "2Gi"),
			alloc:       rl("cpu", "0", "memory", "0"),
			err:         "cpu: reservation 2 exceeds capacity 1; memory: reservation 2Gi exceeds capacity 1Gi",
		},
		{
			name:     "unsupported eviction signal",
			capacity: capacity,
			evict:    rl("pid", "100"),
			err:      `evictionHard: "pid" reserves nothing`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NodeAllocatable(tc.capacity, tc.kube, tc.system, tc.evict)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if tc.kubepods == nil {
				return
			}
			sameList(t, "Kubepods", a.Kubepods, tc.kubepods)
			sameList(t, "Reservation", a.Reservation, tc.reservation)
			sameList(t, "Allocatable", a.Allocatable, tc.alloc)
		})
	}
}

func sameList(t *testing.T, what string, got, want v1.ResourceList) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
		return
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g.Cmp(w) != 0 {
			t.Errorf("%s[%s] = %v, want %v", what, name, g.String(), w.String())
		}
	}
}
