package main

import "testing"

func TestRuntimeInjectsCDI(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"containerd://1.6.20~ds1", false},
		{"containerd://1.6.38", false},
		{"containerd://1.7.0", true},
		{"containerd://v2.4.2", true},
		{"cri-o://1.33.0", true},
		{"containerd://unknown", false},
	} {
		if got, why := runtimeInjectsCDI(tc.version); got != tc.want {
			t.Errorf("runtimeInjectsCDI(%q) = %v (%s), want %v", tc.version, got, why, tc.want)
		}
	}
}
