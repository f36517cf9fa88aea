package cpumanager_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/cpumanager"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/topology"
)

// TestCPUSetsOnContainerd runs the static policy on this machine's real
// topology with one CPU reserved, against a private containerd: a
// Guaranteed pod with cpu: 1 gets an exclusive CPU and a BestEffort pod is
// moved off it, as read back from the containers' cpuset cgroups. The
// cpusets reach the containers through Reconcile and CRI
// UpdateContainerResources; creating containers with CPUSet's answer is
// the lead's wiring in criruntime.
func TestCPUSetsOnContainerd(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	_, ctx := ktesting.NewTestContext(t)
	machine, err := topology.Discover(ctx, topology.HostSysfs())
	if err != nil {
		t.Fatal(err)
	}
	all := machine.CPU.CPUs()
	if all.Size() < 2 {
		agenttest.RequireIntegration(t, "a machine of 2 CPUs", fmt.Errorf("the machine has CPUs %s", all))
	}
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.WithoutCancel(ctx)) })
	raw, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(cri.Endpoint).
		WithConnectionTimeout(time.Minute).WithTracerProvider(nil).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var active []*v1.Pod
	statuses := &runtimeStatuses{rt: rt, ctx: ctx, pods: map[types.UID]*v1.Pod{}}
	cpus, err := cpumanager.New(ctx, cpumanager.Config{
		Policy: cpumanager.PolicyStatic, Topology: machine.CPU,
		ReservedCPU: resource.MustParse("1"), StateDir: t.TempDir(),
		ActivePods: cpumanager.PodListerFunc(func() []*v1.Pod { return active }),
		Status:     statuses,
		Runtime: cpumanager.ResourceUpdaterFunc(func(ctx context.Context, id nodekit.ContainerID, set string) error {
			return raw.UpdateContainerResources(ctx, id.ID, &runtimeapi.ContainerResources{
				Linux: &runtimeapi.LinuxContainerResources{CpusetCpus: set},
			})
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	reserved := cpus.ReservedCPUs()
	t.Logf("machine %v: CPUs %s, reserved %s", machine.CPU, all, reserved)

	run := func(pod *v1.Pod) nodekit.ContainerID {
		t.Helper()
		if d := cpus.Admit(ctx, nodekit.AdmitRequest{Pod: pod, Pods: active}); !d.Admit {
			t.Fatalf("%s rejected: %+v", pod.Name, d)
		}
		active = append(active, pod)
		statuses.pods[pod.UID] = pod
		res := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
		if err := res.Err(); err != nil {
			t.Fatalf("SyncPod %s: %v", pod.Name, err)
		}
		t.Cleanup(func() { removePod(t, rt, pod) })
		st, err := rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		c := st.FindContainer("app")
		if c == nil || c.State != nodekit.StateRunning {
			t.Fatalf("%s: container %+v not running", pod.Name, c)
		}
		return c.ID
	}

	// A BestEffort pod alone: the shared pool is every CPU.
	be := run(sleeper("besteffort", nil))
	if err := cpus.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cgroupCPUs(t, raw, be); got != all.String() {
		t.Fatalf("BestEffort container's cpuset.cpus = %q, want every CPU %q", got, all)
	}

	// A Guaranteed pod with cpu: 1 takes a CPU of its own; the next
	// reconcile moves the BestEffort container off it.
	one := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("64Mi")}
	gu := run(sleeper("guaranteed", &v1.ResourceRequirements{Requests: one, Limits: one}))
	exclusive := cpus.ExclusiveCPUs("uid-guaranteed", "app")
	if exclusive.Size() != 1 || !exclusive.Intersection(reserved).IsEmpty() {
		t.Fatalf("exclusive CPUs %s (reserved %s)", exclusive, reserved)
	}
	if err := cpus.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	shared := all.Difference(exclusive)
	if got := cgroupCPUs(t, raw, gu); got != exclusive.String() {
		t.Errorf("Guaranteed container's cpuset.cpus = %q, want its exclusive %s", got, exclusive)
	}
	if got := cgroupCPUs(t, raw, be); got != shared.String() {
		t.Errorf("BestEffort container's cpuset.cpus = %q, want the shared pool %s", got, shared)
	}
	// The kernel agrees: the processes may only run there.
	for id, want := range map[nodekit.ContainerID]string{gu: exclusive.String(), be: shared.String()} {
		out, _, code, err := rt.ExecSync(ctx, id, []string{"grep", "Cpus_allowed_list", "/proc/self/status"}, 10*time.Second)
		if err != nil || code != 0 || !strings.HasSuffix(strings.TrimSpace(string(out)), "\t"+want) {
			t.Errorf("container %s: %q (exit %d, %v), want Cpus_allowed_list %s", id.ID, out, code, err, want)
		}
	}
	t.Logf("Guaranteed container on CPU %s, BestEffort container on %s", exclusive, shared)
}

func sleeper(name string, res *v1.ResourceRequirements) *v1.Pod {
	c := v1.Container{Name: "app", Image: agenttest.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sleep", "3600"}}
	if res != nil {
		c.Resources = *res
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{Containers: []v1.Container{c}, TerminationGracePeriodSeconds: new(int64)},
	}
}

// runtimeStatuses is a cpumanager.PodStatusGetter that asks the runtime,
// standing in for the status manager.
type runtimeStatuses struct {
	rt   *criruntime.Runtime
	ctx  context.Context
	pods map[types.UID]*v1.Pod
}

func (s *runtimeStatuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	pod, ok := s.pods[uid]
	if !ok {
		return v1.PodStatus{}, false
	}
	st, err := s.rt.GetPodStatus(s.ctx, uid, pod.Name, pod.Namespace)
	if err != nil {
		return v1.PodStatus{}, false
	}
	var out v1.PodStatus
	for _, c := range st.Containers {
		cs := v1.ContainerStatus{Name: c.Name, ContainerID: c.ID.String()}
		if c.State == nodekit.StateRunning {
			cs.State.Running = &v1.ContainerStateRunning{}
		}
		out.ContainerStatuses = append(out.ContainerStatuses, cs)
	}
	return out, true
}

// cgroupCPUs reads cpuset.cpus of the container's cgroup on the host,
// found from its init process (cgroup v1 cpuset hierarchy).
func cgroupCPUs(t *testing.T, raw internalapi.RuntimeService, id nodekit.ContainerID) string {
	t.Helper()
	resp, err := raw.ContainerStatus(t.Context(), id.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("no pid in the verbose status of %s: %v", id.ID, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", info.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[1] == "cpuset" || strings.Contains(parts[1], "cpuset,") || strings.HasSuffix(parts[1], ",cpuset")) {
			cpus, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuset", parts[2], "cpuset.cpus"))
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(string(cpus))
		}
	}
	agenttest.RequireIntegration(t, "a cgroup v1 cpuset hierarchy", fmt.Errorf("no cpuset cgroup for pid %d in %q", info.Pid, b))
	return ""
}

func removePod(t *testing.T, rt *criruntime.Runtime, pod *v1.Pod) {
	ctx := context.WithoutCancel(t.Context())
	pods, err := rt.ListPods(ctx, true)
	if err != nil {
		t.Errorf("list pods: %v", err)
		return
	}
	for _, p := range pods {
		if p.ID != pod.UID {
			continue
		}
		if err := rt.KillPod(ctx, nodekit.KillPodRequest{Pod: pod, Running: p}); err != nil {
			t.Errorf("kill %s: %v", pod.Name, err)
		}
		for _, c := range p.Containers {
			_ = rt.RemoveContainer(ctx, c.ID)
		}
		for _, sb := range p.Sandboxes {
			_ = rt.RemovePodSandbox(ctx, sb.ID.ID)
		}
	}
}
