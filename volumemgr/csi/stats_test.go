package csi_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

// TestVolumeStats publishes a PVC volume through a plugin with metrics and
// asks the driver for its stats before and after a file is written into
// it; the mount, the driver calls and the unmount are observed.
func TestVolumeStats(t *testing.T) {
	pvc, pv := boundClaim("default", "claim", "pv-1", "vol-1")
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	reg := prometheus.NewRegistry()
	clk := testingclock.NewFakeClock(time.Now())
	metrics, err := csi.RegisterMetrics(reg, clk)
	if err != nil {
		t.Fatal(err)
	}
	if e.plugin, err = csi.NewPlugin(csi.PluginConfig{RootDir: e.root, Drivers: e.drivers, API: csi.FromClient(clientgo.Wrap(e.cs)),
		NodeName: nodeName, Metrics: metrics, Clock: clk}); err != nil {
		t.Fatal(err)
	}
	m := e.manager(clk, &events{})
	if _, ok, err := e.plugin.VolumeStats(e.ctx, "uid-1", "data"); ok || err != nil {
		t.Fatalf("stats of a volume not yet published: ok %v, %v; want none", ok, err)
	}
	m.AddPod(podWith("p1", "uid-1", pvcVolume("claim")))
	m.Reconcile(e.ctx)
	before, ok, err := e.plugin.VolumeStats(e.ctx, "uid-1", "data")
	if err != nil || !ok {
		t.Fatalf("VolumeStats: ok %v, %v", ok, err)
	}
	if *before.CapacityBytes == 0 || *before.Inodes == 0 || *before.AvailableBytes > *before.CapacityBytes || !before.Time.Time.Equal(clk.Now()) {
		t.Errorf("stats: %+v", before)
	}
	const size = 3 << 20
	if err := os.WriteFile(filepath.Join(volDir(e.root, "uid-1", "pv-1"), "mount", "f"), make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	after, _, err := e.plugin.VolumeStats(e.ctx, "uid-1", "data")
	if err != nil {
		t.Fatal(err)
	}
	if grown := int64(*after.UsedBytes) - int64(*before.UsedBytes); grown < size {
		t.Errorf("used bytes grew by %d after a %d-byte file (%d -> %d)", grown, size, *before.UsedBytes, *after.UsedBytes)
	}
	if *after.InodesUsed != *before.InodesUsed+1 {
		t.Errorf("inodes used %d -> %d, want one more", *before.InodesUsed, *after.InodesUsed)
	}
	if _, ok, err := e.plugin.VolumeStats(e.ctx, "uid-1", "other"); ok || err != nil {
		t.Errorf("stats of a volume the pod does not have: ok %v, %v", ok, err)
	}
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)

	for series, want := range map[string]int{
		`storage_operation_duration_seconds_count{migrated="false",operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/csi:csi.nodekit.test"}`:   1,
		`storage_operation_duration_seconds_count{migrated="false",operation_name="volume_unmount",status="success",volume_plugin="kubernetes.io/csi:csi.nodekit.test"}`: 1,
		`storage_operation_duration_seconds_count{migrated="false",operation_name="unmount_device",status="success",volume_plugin="kubernetes.io/csi:csi.nodekit.test"}`: 1,
		`csi_operations_seconds_count{driver_name="csi.nodekit.test",grpc_status_code="OK",method_name="/csi.v1.Node/NodeGetVolumeStats",migrated="false"}`:              2,
		`csi_operations_seconds_count{driver_name="csi.nodekit.test",grpc_status_code="OK",method_name="/csi.v1.Node/NodePublishVolume",migrated="false"}`:               1,
	} {
		if got := countOf(t, reg, series); got != want {
			t.Errorf("%s = %d, want %d", series, got, want)
		}
	}
}

// countOf reads one series' value from the text exposition of reg (-1
// when absent).
func countOf(t *testing.T, reg *prometheus.Registry, series string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&text, mf); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range strings.Split(text.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return n
		}
	}
	return -1
}

// TestVolumeStatsNotSupported: a driver without GET_VOLUME_STATS gives its
// volumes no stats, and is not asked for them (upstream's "not supported").
func TestVolumeStatsNotSupported(t *testing.T) {
	drv := startDriver(t, csitest.Options{Name: driverName, NodeID: "drv-node-1", NoVolumeStats: true})
	root := t.TempDir()
	dir := volDir(root, "uid-1", "data")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vol_data.json"), []byte(`{"driverName":"`+driverName+`","volumeHandle":"vol-1"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	drivers := csi.NewDrivers()
	h, err := csi.NewHandler(csi.HandlerConfig{Drivers: drivers})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	if err := h.RegisterPlugin(ctx, driverName, drv.Endpoint, []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	p, err := csi.NewPlugin(csi.PluginConfig{RootDir: root, Drivers: drivers, API: csi.FromClient(clientgo.Wrap(fake.NewClientset()))})
	if err != nil {
		t.Fatal(err)
	}
	if st, ok, err := p.VolumeStats(ctx, "uid-1", "data"); ok || err != nil {
		t.Errorf("VolumeStats: %+v, ok %v, %v; want none", st, ok, err)
	}
	calls, err := drv.Calls()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		if strings.HasPrefix(c, "NodeGetVolumeStats") {
			t.Errorf("the driver was asked for stats: %s", c)
		}
	}
	// An unregistered driver is an error (transient upstream), not "none".
	drivers2 := csi.NewDrivers()
	p2, err := csi.NewPlugin(csi.PluginConfig{RootDir: root, Drivers: drivers2, API: csi.FromClient(clientgo.Wrap(fake.NewClientset()))})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p2.VolumeStats(ctx, "uid-1", "data"); err == nil || !strings.Contains(err.Error(), "not found in the list of registered CSI drivers") {
		t.Errorf("VolumeStats with the driver gone: %v", err)
	}
}
