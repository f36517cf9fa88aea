package cpushares

import "testing"

func TestConversions(t *testing.T) {
	for _, tc := range []struct {
		milli         int64
		shares        uint64
		weight, back  uint64
		milliFromBack int64
	}{
		{0, 2, 1, 2, 2},
		{1, 2, 1, 2, 2},
		{100, 102, 4, 80, 79},
		{500, 512, 20, 500, 489},
		{1000, 1024, 39, 998, 975},
		{300000, 262144, 10000, 262144, 256000},
	} {
		if got := FromMilliCPU(tc.milli); got != tc.shares {
			t.Errorf("FromMilliCPU(%d) = %d, want %d", tc.milli, got, tc.shares)
		}
		if got := ToWeight(tc.shares); got != tc.weight {
			t.Errorf("ToWeight(%d) = %d, want %d", tc.shares, got, tc.weight)
		}
		if got := FromWeight(tc.weight); got != tc.back {
			t.Errorf("FromWeight(%d) = %d, want %d", tc.weight, got, tc.back)
		}
		if got := ToMilliCPU(tc.back); got != tc.milliFromBack {
			t.Errorf("ToMilliCPU(%d) = %d, want %d", tc.back, got, tc.milliFromBack)
		}
	}
	if ToMilliCPU(1) != 0 {
		t.Error("shares below the minimum give a CPU request")
	}
}
