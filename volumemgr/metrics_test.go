package volumemgr_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
)

// TestTotalVolumesMetric counts the desired and the set-up volumes per
// plugin, and a volume no plugin handles as N/A in the desired state only.
func TestTotalVolumesMetric(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewPedanticRegistry()
	if err := f.m.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("series with no pods: %d, %v", n, err)
	}
	scratch := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
	nfs := v1.Volume{Name: "share", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}}
	f.mount(testPod("a", scratch))
	f.m.AddPod(testPod("b", scratch, nfs))
	f.reconcile()
	want := `
# HELP volume_manager_total_volumes [ALPHA] Number of volumes in Volume Manager
# TYPE volume_manager_total_volumes gauge
volume_manager_total_volumes{plugin_name="N/A",state="desired_state_of_world"} 1
volume_manager_total_volumes{plugin_name="kubernetes.io/empty-dir",state="actual_state_of_world"} 2
volume_manager_total_volumes{plugin_name="kubernetes.io/empty-dir",state="desired_state_of_world"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	f.m.RemovePod("uid-a")
	f.m.RemovePod("uid-b")
	f.reconcile()
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("series after the pods left: %d, %v", n, err)
	}
}
