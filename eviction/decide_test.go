package eviction

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestAdmitUnderPressure(t *testing.T) {
	mem := []v1.NodeConditionType{v1.NodeMemoryPressure}
	disk := []v1.NodeConditionType{v1.NodeDiskPressure}
	both := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure}
	bestEffort := mkPod("be", 0)
	burstable := mkPod("burstable", 0, "100Mi")
	critical := mkPod("critical", SystemCriticalPriority)
	static := mkPod("static", 0)
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	mirror := mkPod("mirror", 0)
	mirror.Annotations = map[string]string{"kubernetes.io/config.mirror": "abc", "kubernetes.io/config.source": "api"}
	tolerant := mkPod("tolerant-be", 0)
	tolerant.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	qosSet := mkPod("qos-from-status", 0, "1Mi")
	qosSet.Status.QOSClass = v1.PodQOSBestEffort

	tests := []struct {
		name  string
		pod   *v1.Pod
		conds []v1.NodeConditionType
		admit bool
		msg   string
	}{
		{"no pressure", bestEffort, nil, true, ""},
		{"memory: best effort refused", bestEffort, mem, false, "The node had condition: [MemoryPressure]. "},
		{"memory: qos from status", qosSet, mem, false, "The node had condition: [MemoryPressure]. "},
		{"memory: burstable admitted", burstable, mem, true, ""},
		{"memory: tolerating best effort admitted", tolerant, mem, true, ""},
		{"memory: critical admitted", critical, mem, true, ""},
		{"disk: burstable refused", burstable, disk, false, "The node had condition: [DiskPressure]. "},
		{"disk: tolerating best effort refused", tolerant, disk, false, "The node had condition: [DiskPressure]. "},
		{"memory+disk: burstable refused", burstable, both, false, "The node had condition: [MemoryPressure DiskPressure]. "},
		{"disk: critical admitted", critical, disk, true, ""},
		{"disk: static admitted", static, disk, true, ""},
		{"disk: mirror admitted", mirror, disk, true, ""},
		{"pid: burstable refused", burstable, []v1.NodeConditionType{v1.NodePIDPressure}, false, "The node had condition: [PIDPressure]. "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := AdmitUnderPressure(tt.pod, tt.conds)
			if d.Admit != tt.admit {
				t.Fatalf("admit = %v, want %v (%+v)", d.Admit, tt.admit, d)
			}
			if !tt.admit && (d.Reason != "Evicted" || d.Message != tt.msg) {
				t.Errorf("decision = %+v, want reason Evicted message %q", d, tt.msg)
			}
		})
	}
}

func TestLocalStorageViolation(t *testing.T) {
	withEmptyDir := func(limit string, medium v1.StorageMedium) *v1.Pod {
		p := mkPod("p", 0)
		ed := &v1.EmptyDirVolumeSource{Medium: medium}
		if limit != "" {
			ed.SizeLimit = qty(limit)
		}
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: ed}}}
		return p
	}
	withLimit := func(limit string) *v1.Pod {
		p := mkPod("p", 0)
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(limit)}
		return p
	}
	st := func(vol, rootfs, logs, total uint64) statsapi.PodStats {
		return statsapi.PodStats{
			VolumeStats:      []statsapi.VolumeStats{{Name: "scratch", FsStats: statsapi.FsStats{UsedBytes: ptr(vol)}}},
			Containers:       []statsapi.ContainerStats{{Name: "c0", Rootfs: &statsapi.FsStats{UsedBytes: ptr(rootfs)}, Logs: &statsapi.FsStats{UsedBytes: ptr(logs)}}},
			EphemeralStorage: &statsapi.FsStats{UsedBytes: ptr(total)},
		}
	}
	tests := []struct {
		name      string
		pod       *v1.Pod
		stats     statsapi.PodStats
		dedicated bool
		want      string
	}{
		{"emptyDir within limit", withEmptyDir("1Mi", ""), st(1<<20, 0, 0, 0), false, ""},
		{"emptyDir over limit", withEmptyDir("1Mi", ""), st(1<<20+1, 0, 0, 0), false, `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". `},
		{"memory emptyDir ignored", withEmptyDir("1Mi", v1.StorageMediumMemory), st(2<<20, 0, 0, 0), false, ""},
		{"emptyDir without limit", withEmptyDir("", ""), st(2<<30, 0, 0, 0), false, ""},
		{"pod total over container limits", withLimit("10Mi"), st(0, 1<<20, 1<<20, 11<<20), false, "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. "},
		{"container rootfs+logs over limit", withLimit("10Mi"), st(0, 6<<20, 5<<20, 1<<20), false, `Container c0 exceeded its local ephemeral storage limit "10Mi". `},
		{"dedicated imagefs counts logs only", withLimit("10Mi"), st(0, 6<<20, 5<<20, 1<<20), true, ""},
		{"no limits", mkPod("p", 0), st(9<<30, 9<<30, 9<<30, 9<<30), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, bad := LocalStorageViolation(tt.pod, tt.stats, tt.dedicated)
			if bad != (tt.want != "") || msg != tt.want {
				t.Errorf("got (%q, %v), want %q", msg, bad, tt.want)
			}
			if bad && !storageLimited(tt.pod) {
				t.Errorf("violation for a pod storageLimited calls unlimited")
			}
		})
	}
}

// The manager skips the pods' stats when no pod is storageLimited, so
// every pod it calls unlimited must be one no usage can get evicted.
func TestStorageLimited(t *testing.T) {
	limit := v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Mi")}
	sidecar := v1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		mod  func(p *v1.Pod)
		want bool
	}{
		{"nothing", func(*v1.Pod) {}, false},
		{"memory limit only", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Mi")}
		}, false},
		{"emptyDir without limit", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "s", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		}, false},
		{"memory emptyDir with limit", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "s", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: qty("1Mi")}}}}
		}, false},
		{"emptyDir with limit", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "s", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: qty("1Mi")}}}}
		}, true},
		{"container limit", func(p *v1.Pod) { p.Spec.Containers[0].Resources.Limits = limit }, true},
		{"sidecar limit", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "side", RestartPolicy: &sidecar, Resources: v1.ResourceRequirements{Limits: limit}}}
		}, true},
		{"init container limit", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Limits: limit}}}
		}, true},
	}
	huge := uint64(1 << 50)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mkPod("p", 0)
			tt.mod(p)
			if got := storageLimited(p); got != tt.want {
				t.Fatalf("storageLimited = %v, want %v", got, tt.want)
			}
			if tt.want {
				return
			}
			var cs []statsapi.ContainerStats
			for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
				cs = append(cs, statsapi.ContainerStats{Name: c.Name, Rootfs: &statsapi.FsStats{UsedBytes: &huge}, Logs: &statsapi.FsStats{UsedBytes: &huge}})
			}
			st := statsapi.PodStats{Containers: cs, EphemeralStorage: &statsapi.FsStats{UsedBytes: &huge},
				VolumeStats: []statsapi.VolumeStats{{Name: "s", FsStats: statsapi.FsStats{UsedBytes: &huge}}}}
			if msg, bad := LocalStorageViolation(p, st, false); bad {
				t.Errorf("an unlimited pod violates: %s", msg)
			}
		})
	}
}

func TestEvictionMessage(t *testing.T) {
	p := mkPod("hog", 0, "100Mi")
	stats := podStats(p, 300<<20)
	stats.Containers = []statsapi.ContainerStats{{Name: "c0", Memory: &statsapi.MemoryStats{WorkingSetBytes: ptr(uint64(300 << 20))}}}
	th := Threshold{Signal: SignalMemoryAvailable, Value: Value{Quantity: qty("500Mi")}}
	obs := Observations{SignalMemoryAvailable: {Available: 100 << 20, Capacity: 1 << 30}}
	got := EvictionMessage(th, obs, p, StatsByUID([]statsapi.PodStats{stats}))
	want := "The node was low on resource: memory. Threshold quantity: 500Mi, available: 100Mi. Container c0 was using 300Mi, request is 100Mi, has larger consumption of memory. "
	if got != want {
		t.Errorf("message\n got %q\nwant %q", got, want)
	}
	if !strings.HasPrefix(EvictionMessage(Threshold{Signal: SignalPIDAvailable, Value: Value{Quantity: qty("10")}}, nil, p, StatsByUID(nil)), "The node was low on resource: pids. ") {
		t.Error("pid message")
	}
}

func TestGracePeriodFor(t *testing.T) {
	p := mkPod("p", 0)
	p.Spec.TerminationGracePeriodSeconds = ptr(int64(30))
	if g := GracePeriodFor(&Threshold{}, p, 10); g != 1 {
		t.Errorf("hard = %d", g)
	}
	if g := GracePeriodFor(&Threshold{GracePeriod: 1}, p, 10); g != 10 {
		t.Errorf("soft capped = %d", g)
	}
	if g := GracePeriodFor(&Threshold{GracePeriod: 1}, p, 60); g != 30 {
		t.Errorf("soft pod's own = %d", g)
	}
}
