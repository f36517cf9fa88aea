package eviction

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func ptr[T any](v T) *T { return &v }

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

// mkPod builds a pod with one container per request (memory requests).
func mkPod(name string, prio int32, memRequests ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name)},
		Spec: v1.PodSpec{Priority: ptr(prio)}}
	for i, r := range memRequests {
		c := v1.Container{Name: fmt.Sprintf("c%d", i)}
		if r != "" {
			c.Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse(r)}
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	if len(memRequests) == 0 {
		p.Spec.Containers = []v1.Container{{Name: "c0"}}
	}
	return p
}

func podStats(pod *v1.Pod, workingSet uint64) statsapi.PodStats {
	return statsapi.PodStats{
		PodRef: statsapi.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
		Memory: &statsapi.MemoryStats{WorkingSetBytes: ptr(workingSet)},
	}
}

// nodeSummary has memory available/working set and nodefs available/capacity.
func nodeSummary(at time.Time, memAvail, memWS, fsAvail, fsCap uint64, pods ...statsapi.PodStats) *statsapi.Summary {
	t := metav1.NewTime(at)
	return &statsapi.Summary{
		Node: statsapi.NodeStats{
			Memory: &statsapi.MemoryStats{Time: t, AvailableBytes: ptr(memAvail), WorkingSetBytes: ptr(memWS)},
			Fs:     &statsapi.FsStats{Time: t, AvailableBytes: ptr(fsAvail), CapacityBytes: ptr(fsCap), Inodes: ptr(uint64(1000)), InodesFree: ptr(uint64(900))},
			Runtime: &statsapi.RuntimeStats{ImageFs: &statsapi.FsStats{Time: t, AvailableBytes: ptr(fsAvail), CapacityBytes: ptr(fsCap),
				Inodes: ptr(uint64(1000)), InodesFree: ptr(uint64(900))}},
			Rlimit: &statsapi.RlimitStats{Time: t, MaxPID: ptr(int64(1000)), NumOfRunningProcesses: ptr(int64(100))},
		},
		Pods: pods,
	}
}
