package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
)

// TestCSIVolumeStats: a pod on a PVC of the test kit's CSI driver writes
// 8 MiB; through the API server's proxy, kubelet_volume_stats_used_bytes of
// the claim and the Summary API's pvcRef volume show the growth (measured
// by NodeGetVolumeStats every volumeStatsAggPeriod, 2s here),
// volume_manager_total_volumes counts the CSI volume, the CSI calls and
// the mount are observed, and the claim's series go with the pod.
func TestCSIVolumeStats(t *testing.T) {
	e := startEnv(t, envOption{config: "volumeStatsAggPeriod: 2s\n", cp: []agenttest.ControlPlaneOption{agenttest.WithControllerManager()}})
	ctx := t.Context()
	e.startCSIDriver(t, csitest.Options{})
	poll(t, 60*time.Second, "CSINode lists the driver", func(ctx context.Context) (bool, error) {
		cn, err := e.client.StorageV1().CSINodes().Get(ctx, testNode, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && len(cn.Spec.Drivers) == 1, err
	})
	policy := storagev1.FileFSGroupPolicy
	if _, err := e.client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), FSGroupPolicy: &policy}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createBoundClaim(t, e, "stats-claim", "pv-stats", "vol-stats")
	pod := simplePod("csi-stats", v1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "stats-claim"}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	e.createPod(t, pod)
	p := e.waitPod(t, "csi-stats", 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	const used = `kubelet_volume_stats_used_bytes{namespace="default",persistentvolumeclaim="stats-claim"}`
	var before float64
	poll(t, 60*time.Second, "the claim's kubelet_volume_stats_used_bytes", func(ctx context.Context) (bool, error) {
		m, err := e.scrape(ctx, "metrics")
		if err != nil {
			return false, nil
		}
		v, ok := m[used]
		before = v
		return ok, nil
	})
	const size = 8 << 20
	e.exec(t, p, "app", "sh", "-c", fmt.Sprintf("dd if=/dev/zero of=/data/big bs=1048576 count=%d && sync", size>>20))
	var last map[string]float64
	poll(t, 60*time.Second, "used bytes grown by 8 MiB in /metrics", func(ctx context.Context) (bool, error) {
		m, err := e.scrape(ctx, "metrics")
		if err != nil {
			return false, nil
		}
		last = m
		return m[used] >= before+size, nil
	})
	t.Logf("kubelet_volume_stats_used_bytes %v -> %v", before, last[used])
	for _, series := range []string{
		`kubelet_volume_stats_capacity_bytes{namespace="default",persistentvolumeclaim="stats-claim"}`,
		`kubelet_volume_stats_available_bytes{namespace="default",persistentvolumeclaim="stats-claim"}`,
		`kubelet_volume_stats_inodes{namespace="default",persistentvolumeclaim="stats-claim"}`,
		`kubelet_volume_stats_inodes_free{namespace="default",persistentvolumeclaim="stats-claim"}`,
		`kubelet_volume_stats_inodes_used{namespace="default",persistentvolumeclaim="stats-claim"}`,
		`volume_manager_total_volumes{plugin_name="kubernetes.io/csi:csi.nodekit.test",state="actual_state_of_world"}`,
		`volume_manager_total_volumes{plugin_name="kubernetes.io/csi:csi.nodekit.test",state="desired_state_of_world"}`,
	} {
		if last[series] <= 0 {
			t.Errorf("%s = %v, want > 0", series, last[series])
		}
	}
	for _, series := range []string{
		`csi_operations_seconds_count{driver_name="csi.nodekit.test",grpc_status_code="OK",method_name="/csi.v1.Node/NodeGetVolumeStats",migrated="false"}`,
		`csi_operations_seconds_count{driver_name="csi.nodekit.test",grpc_status_code="OK",method_name="/csi.v1.Node/NodePublishVolume",migrated="false"}`,
		`storage_operation_duration_seconds_count{migrated="false",operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/csi:csi.nodekit.test"}`,
	} {
		if last[series] < 1 {
			t.Errorf("%s = %v, want observations", series, last[series])
		}
	}

	poll(t, 60*time.Second, "the Summary's pvcRef volume shows the growth", func(ctx context.Context) (bool, error) {
		b, err := e.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", testNode, "proxy", "stats", "summary").DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		var sum statsv1alpha1.Summary
		if err := json.Unmarshal(b, &sum); err != nil {
			return false, err
		}
		for _, ps := range sum.Pods {
			if ps.PodRef.Name != "csi-stats" {
				continue
			}
			for _, vs := range ps.VolumeStats {
				if vs.Name == "data" && vs.PVCRef != nil && vs.PVCRef.Name == "stats-claim" && vs.PVCRef.Namespace == "default" &&
					vs.UsedBytes != nil && float64(*vs.UsedBytes) >= before+size && vs.CapacityBytes != nil && *vs.CapacityBytes > 0 {
					return true, nil
				}
			}
		}
		return false, nil
	})

	deletePodAndWait(t, e, "csi-stats")
	poll(t, 60*time.Second, "the claim's series gone after the pod", func(ctx context.Context) (bool, error) {
		m, err := e.scrape(ctx, "metrics")
		if err != nil {
			return false, nil
		}
		_, ok := m[used]
		return !ok, nil
	})
}
