package cgroupmgr

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// PodCgroupPath is the path EnsurePod's cgroup has below the mounts, in
// the driver's spelling, without creating it.
func TestPodCgroupPath(t *testing.T) {
	for _, tc := range []struct {
		driver string
		pod    *v1.Pod
		want   string
	}{
		{DriverCgroupfs, burstablePod, "/kubepods/burstable/podb-1234"},
		{DriverCgroupfs, guaranteedPod, "/kubepods/podg-1"},
		{DriverCgroupfs, bestEffortPod, "/kubepods/besteffort/podbe-1"},
		{DriverSystemd, burstablePod, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podb_1234.slice"},
	} {
		cfg := nodeConfig(t.TempDir(), &killRecorder{})
		cfg.Driver = tc.driver
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.PodCgroupPath(tc.pod)
		if err != nil || got != tc.want {
			t.Errorf("%s %s: PodCgroupPath = %q, %v; want %q", tc.driver, tc.pod.UID, got, err, tc.want)
		}
	}
	m, _ := New(nodeConfig(t.TempDir(), &killRecorder{}))
	if _, err := m.PodCgroupPath(&v1.Pod{}); err == nil {
		t.Error("PodCgroupPath of a pod without a UID succeeded")
	}
}
