package stats_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/stats"
)

// TestContainerdStats runs a CPU-burning busybox on a private containerd
// and checks the Summary shows it using CPU and memory, close to what the
// runtime itself reports.
func TestContainerdStats(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	ctx := t.Context()
	logs := t.TempDir()
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "burn", Namespace: "default", UID: types.UID("uid-stats-burn")},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptrTo(int64(1)), Containers: []v1.Container{{
			Name: "app", Image: agenttest.BusyboxImage, ImagePullPolicy: v1.PullNever,
			// Hold ~16 MiB in a shell variable and spin.
			Command: []string{"sh", "-c", `x=$(head -c 16777216 /dev/zero | tr '\0' a); while true; do :; done`},
		}}},
	}
	// A pod cgroup of the test's own, as cgroupmgr would make it, so the
	// Summary finds the pod's and the container's cgroups.
	top := fmt.Sprintf("/nodekit-stats-test-%d", os.Getpid())
	podCgroup := top + "/pod" + string(pod.UID)
	t.Cleanup(func() { removeCgroup(top, podCgroup) })
	if err := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}},
		Sandbox: nodekit.SandboxOptions{CgroupParent: podCgroup}}).Err(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	t.Cleanup(func() {
		pods, _ := rt.ListPods(context.Background(), true)
		for _, p := range pods {
			if p.ID == pod.UID {
				_ = rt.KillPod(context.Background(), nodekit.KillPodRequest{Pod: pod, Running: p})
				for _, sb := range p.Sandboxes {
					_ = rt.RemovePodSandbox(context.Background(), sb.ID.ID)
				}
			}
		}
	})

	p, err := stats.New(stats.Config{NodeName: "it", RootDir: t.TempDir(), PodLogsDir: logs, Runtime: rt, Pods: rt,
		PodCgroups: podCgroups{pod.UID: podCgroup}})
	if err != nil {
		t.Fatal(err)
	}
	find := func(sum *statsapi.Summary) *statsapi.PodStats {
		for i := range sum.Pods {
			if sum.Pods[i].PodRef.UID == string(pod.UID) {
				return &sum.Pods[i]
			}
		}
		return nil
	}
	var ps *statsapi.PodStats
	var sum *statsapi.Summary
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		sum, err = p.Summary(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		ps = find(sum)
		if ps != nil && len(ps.Containers) == 1 {
			c := ps.Containers[0]
			if c.CPU != nil && c.CPU.UsageNanoCores != nil && *c.CPU.UsageNanoCores > 0 &&
				c.Memory != nil && c.Memory.WorkingSetBytes != nil && *c.Memory.WorkingSetBytes > 16<<20 {
				break
			}
		}
		time.Sleep(1500 * time.Millisecond) // real runtime, real time: rates need two readings
	}
	if ps == nil || len(ps.Containers) != 1 {
		t.Fatalf("pod not in summary: %+v", sum.Pods)
	}
	c := ps.Containers[0]
	if c.CPU == nil || c.CPU.UsageNanoCores == nil || *c.CPU.UsageNanoCores == 0 {
		t.Fatalf("container CPU = %+v", c.CPU)
	}
	if c.Memory == nil || c.Memory.WorkingSetBytes == nil || *c.Memory.WorkingSetBytes < 16<<20 {
		t.Fatalf("container memory = %+v", c.Memory)
	}
	t.Logf("container app: %d nanocores, working set %d bytes, start %v", *c.CPU.UsageNanoCores, *c.Memory.WorkingSetBytes, c.StartTime)
	if c.StartTime.IsZero() {
		t.Error("container start time missing")
	}
	if ps.CPU == nil || ps.CPU.UsageCoreNanoSeconds == nil || *ps.CPU.UsageCoreNanoSeconds == 0 || ps.Memory == nil || *ps.Memory.WorkingSetBytes == 0 {
		t.Errorf("pod cpu %+v memory %+v", ps.CPU, ps.Memory)
	}

	// Compare with what the runtime reports directly (as crictl stats does).
	cs, err := rt.ListContainerStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cs {
		if s.GetAttributes().GetLabels()["io.kubernetes.pod.uid"] != string(pod.UID) || s.GetMemory().GetWorkingSetBytes() == nil {
			continue
		}
		crictl := float64(s.GetMemory().GetWorkingSetBytes().GetValue())
		ours := float64(*c.Memory.WorkingSetBytes)
		if ours < crictl*0.8 || ours > crictl*1.2 {
			t.Errorf("working set %v vs runtime's %v: more than 20%% apart", ours, crictl)
		}
	}

	n := sum.Node
	if n.CPU.UsageNanoCores == nil || *n.CPU.UsageNanoCores == 0 || *n.Memory.WorkingSetBytes == 0 || *n.Memory.AvailableBytes == 0 {
		t.Errorf("node cpu %+v memory %+v", n.CPU, n.Memory)
	}
	if n.Runtime == nil || n.Runtime.ImageFs == nil || *n.Runtime.ImageFs.CapacityBytes == 0 || n.Runtime.ImageFs.UsedBytes == nil {
		t.Errorf("imagefs = %+v", n.Runtime)
	} else {
		// containerd refreshes its snapshot usage periodically: 0 is allowed early.
		t.Logf("imagefs: capacity %d available %d used %d", *n.Runtime.ImageFs.CapacityBytes, *n.Runtime.ImageFs.AvailableBytes, *n.Runtime.ImageFs.UsedBytes)
	}
	if n.Rlimit == nil || *n.Rlimit.MaxPID == 0 || n.Fs == nil || *n.Fs.CapacityBytes == 0 {
		t.Errorf("rlimit %+v fs %+v", n.Rlimit, n.Fs)
	}
	checkPressure(t, sum, ps)
}

// checkPressure: the node, the pod and its container carry cpu, memory
// and io PSI blocks, as kubelet v1.37 on containerd; under cgroup v1
// (this project's CI machines) they are zeros, the hybrid unified mount's
// pressure files notwithstanding.
func checkPressure(t *testing.T, sum *statsapi.Summary, ps *statsapi.PodStats) {
	t.Helper()
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	v2 := err == nil
	c := ps.Containers[0]
	for where, blocks := range map[string][3]*statsapi.PSIStats{
		"node":      {sum.Node.CPU.PSI, sum.Node.Memory.PSI, ioPSI(sum.Node.IO)},
		"pod":       {ps.CPU.PSI, ps.Memory.PSI, ioPSI(ps.IO)},
		"container": {c.CPU.PSI, c.Memory.PSI, ioPSI(c.IO)},
	} {
		for i, b := range blocks {
			res := []string{"cpu", "memory", "io"}[i]
			switch {
			case b == nil:
				t.Errorf("%s %s: no psi block", where, res)
			case !v2 && *b != (statsapi.PSIStats{}):
				t.Errorf("%s %s: psi %+v under cgroup v1, want zeros", where, res, *b)
			default:
				t.Logf("%s %s psi (cgroup v2 %v): %+v", where, res, v2, *b)
			}
		}
	}
}

func ioPSI(io *statsapi.IOStats) *statsapi.PSIStats {
	if io == nil {
		return nil
	}
	return io.PSI
}

type podCgroups map[types.UID]string

func (f podCgroups) PodCgroup(uid types.UID) (string, bool) { p, ok := f[uid]; return p, ok }

// removeCgroup removes the pod cgroup and its parent the runtime made
// (its container cgroups are gone with the containers), in every
// hierarchy.
func removeCgroup(top, pod string) {
	dirs := []string{"/sys/fs/cgroup"}
	if entries, err := os.ReadDir("/sys/fs/cgroup"); err == nil {
		for _, e := range entries {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	for _, d := range dirs {
		_ = os.Remove(filepath.Join(d, pod))
		_ = os.Remove(filepath.Join(d, top))
	}
}

func ptrTo[T any](v T) *T { return &v }
