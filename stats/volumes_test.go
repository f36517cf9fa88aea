package stats

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
)

type fakeSpecs []*v1.Pod

func (f *fakeSpecs) Pods() []*v1.Pod { return *f }

var _ PodSpecs = (*fakeSpecs)(nil)

// fakeMeasurer answers from a map "UID/VOLUME" → used bytes; a missing key
// is a volume without stats, "fail" in the name fails.
type fakeMeasurer struct {
	used  map[string]uint64
	calls []string
}

func (f *fakeMeasurer) VolumeStats(_ context.Context, uid types.UID, name string) (*statsapi.FsStats, bool, error) {
	f.calls = append(f.calls, string(uid)+"/"+name)
	if strings.Contains(name, "fail") {
		return nil, false, errors.New("driver down")
	}
	used, ok := f.used[string(uid)+"/"+name]
	if !ok {
		return nil, false, nil
	}
	capacity, inodes := uint64(1<<30), uint64(1000)
	free, ifree, iused := capacity-used, uint64(990), uint64(10)
	return &statsapi.FsStats{CapacityBytes: &capacity, AvailableBytes: &free, UsedBytes: &used,
		Inodes: &inodes, InodesFree: &ifree, InodesUsed: &iused}, true, nil
}

var _ VolumeMeasurer = (*fakeMeasurer)(nil)

func volumesPod(ns, name, uid string, vols ...v1.Volume) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}, Spec: v1.PodSpec{Volumes: vols}}
}

func claimVol(name, claim string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func TestMeasureVolumes(t *testing.T) {
	specs := &fakeSpecs{
		volumesPod("ns1", "db", "uid-1",
			claimVol("data", "claim-a"),
			v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}},
			v1.Volume{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d"}}},
			v1.Volume{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			claimVol("nostats", "claim-b"),
			claimVol("fail", "claim-c")),
		volumesPod("ns1", "reader", "uid-2", claimVol("shared", "claim-a")),
	}
	m := &fakeMeasurer{used: map[string]uint64{"uid-1/data": 5 << 20, "uid-1/scratch": 1 << 20, "uid-1/inline": 4096, "uid-2/shared": 5 << 20}}
	root := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	cri := &fakeCRI{mount: root, containers: []*runtimeapi.ContainerStats{ctrStats("c1", "app", 0, 1, 1, 1, clk.Now())}}
	p, err := New(Config{RootDir: root, PodLogsDir: t.TempDir(), Runtime: cri, Clock: clk, Specs: specs, Volumes: m})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := p.RegisterVolumeMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("series before any measurement: %d, %v", n, err)
	}
	p.MeasureVolumes(t.Context())
	if strings.Join(m.calls, " ") != "uid-1/data uid-1/scratch uid-1/inline uid-1/nostats uid-1/fail uid-2/shared" {
		t.Errorf("measured %v; want the plugin volumes only, emptyDir left to the provider", m.calls)
	}
	sum, err := p.Summary(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, vs := range sum.Pods[0].VolumeStats {
		ref := "-"
		if vs.PVCRef != nil {
			ref = vs.PVCRef.Namespace + "/" + vs.PVCRef.Name
		}
		got = append(got, vs.Name+"="+ref)
	}
	if strings.Join(got, " ") != "data=ns1/claim-a inline=- scratch=ns1/db-scratch" {
		t.Errorf("uid-1 volume stats: %v", got)
	}
	// One series set per claim (claim-a is mounted by two pods), PVCs only.
	want := `
# HELP kubelet_volume_stats_used_bytes [ALPHA] Number of used bytes in the volume
# TYPE kubelet_volume_stats_used_bytes gauge
kubelet_volume_stats_used_bytes{namespace="ns1",persistentvolumeclaim="claim-a"} 5.24288e+06
kubelet_volume_stats_used_bytes{namespace="ns1",persistentvolumeclaim="db-scratch"} 1.048576e+06
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_volume_stats_used_bytes"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 12 {
		t.Errorf("series: %d, %v; want 6 per claim", n, err)
	}
	// The pod leaves: its series go with the next measurement.
	*specs = (*specs)[1:]
	p.MeasureVolumes(t.Context())
	if n, err := testutil.GatherAndCount(reg, "kubelet_volume_stats_capacity_bytes"); err != nil || n != 1 {
		t.Errorf("capacity series after uid-1 left: %d, %v; want claim-a's (uid-2) only", n, err)
	}
	*specs = nil
	p.MeasureVolumes(t.Context())
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("series with no pods: %d, %v", n, err)
	}
}

// TestRunVolumeStats measures at once and then every period, in a
// synctest bubble (the real clock there is the bubble's).
func TestRunVolumeStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		specs := &fakeSpecs{volumesPod("ns", "p", "uid-1", claimVol("data", "c"))}
		m := &fakeMeasurer{used: map[string]uint64{"uid-1/data": 1}}
		p, err := New(Config{RootDir: t.TempDir(), Runtime: &fakeCRI{}, Specs: specs, Volumes: m, VolumeStatsPeriod: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- p.RunVolumeStats(ctx) }()
		synctest.Wait()
		if len(m.calls) != 1 {
			t.Fatalf("calls at start: %v", m.calls)
		}
		time.Sleep(29 * time.Second)
		synctest.Wait()
		if len(m.calls) != 1 {
			t.Fatalf("calls before the period: %v", m.calls)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if len(m.calls) != 2 {
			t.Fatalf("calls after one period: %v", m.calls)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// TestRunVolumeStatsDisabled: a negative period (volumeStatsAggPeriod 0)
// measures nothing.
func TestRunVolumeStatsDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &fakeMeasurer{}
		p, err := New(Config{RootDir: t.TempDir(), Runtime: &fakeCRI{}, Specs: &fakeSpecs{volumesPod("ns", "p", "uid-1", claimVol("data", "c"))},
			Volumes: m, VolumeStatsPeriod: -1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- p.RunVolumeStats(ctx) }()
		time.Sleep(time.Hour)
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(m.calls) != 0 {
			t.Errorf("measured with the period disabled: %v", m.calls)
		}
	})
}

// TestMeasureLocalVolumes: with Config.Specs the local volumes (emptyDir
// on disk and in memory, configMap, secret, projected) are measured by
// MeasureVolumes only, as upstream's calculators: the Summary reports none
// before the first measurement, and the pod's ephemeral storage counts the
// disk emptyDir and the configMap (upstream's local ephemeral volumes) but
// not the secret or projected volume. hostPath has no stats.
func TestMeasureLocalVolumes(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"pods/uid-1/volumes/kubernetes.io~empty-dir/scratch/data":  string(make([]byte, 64<<10)),
		"pods/uid-1/volumes/kubernetes.io~configmap/conf/key":      string(make([]byte, 8<<10)),
		"pods/uid-1/volumes/kubernetes.io~secret/token/key":        string(make([]byte, 16<<10)),
		"pods/uid-1/volumes/kubernetes.io~projected/kube-api/ca":   string(make([]byte, 4<<10)),
		"pods/uid-1/volumes/kubernetes.io~empty-dir/not-in-spec/x": "x",
	})
	specs := &fakeSpecs{volumesPod("default", "web", "uid-1",
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "conf", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
		v1.Volume{Name: "token", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}},
		v1.Volume{Name: "kube-api", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}},
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: root}}},
		v1.Volume{Name: "not-set-up", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	cri := &fakeCRI{mount: root, containers: []*runtimeapi.ContainerStats{ctrStats("c1", "app", 0, 1, 1, 4096, clk.Now())}}
	p, err := New(Config{RootDir: root, PodLogsDir: t.TempDir(), Runtime: cri, Clock: clk, Specs: specs})
	if err != nil {
		t.Fatal(err)
	}
	volumes := func() (names []string, eph uint64) {
		sum, err := p.Summary(t.Context(), false)
		if err != nil || len(sum.Pods) != 1 {
			t.Fatalf("summary: %v, %+v", err, sum)
		}
		for _, vs := range sum.Pods[0].VolumeStats {
			if vs.CapacityBytes == nil || *vs.CapacityBytes == 0 || vs.UsedBytes == nil {
				t.Errorf("volume %s: no capacity or use: %+v", vs.Name, vs.FsStats)
			}
			names = append(names, vs.Name)
		}
		return names, deref(sum.Pods[0].EphemeralStorage.UsedBytes)
	}
	if names, eph := volumes(); len(names) != 0 || eph != 4096 {
		t.Fatalf("before any measurement: volumes %v, ephemeral %d; want none and the writable layer only", names, eph)
	}
	p.MeasureVolumes(t.Context())
	names, eph := volumes()
	if strings.Join(names, " ") != "conf kube-api scratch token" {
		t.Errorf("volumes: %v", names)
	}
	scratch, _ := Du(root + "/pods/uid-1/volumes/kubernetes.io~empty-dir/scratch")
	conf, _ := Du(root + "/pods/uid-1/volumes/kubernetes.io~configmap/conf")
	if want := 4096 + scratch.Bytes + conf.Bytes; eph != want {
		t.Errorf("ephemeral storage %d, want %d (layer + scratch + conf)", eph, want)
	}
	*specs = nil
	p.MeasureVolumes(t.Context())
	if names, _ := volumes(); len(names) != 0 {
		t.Errorf("volumes after the pod left the specs: %v", names)
	}
}
