package cgroupmgr

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
)

// TestPodCgroupOnContainerd hands EnsurePod's cgroup parent to a real
// containerd (cgroupfs driver) as the sandbox's, and finds the busybox
// container's process in <parent>/<container ID>, under the pod's limits.
func TestPodCgroupOnContainerd(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	v := realCgroups(t)
	root := testCgroupRoot(t, v)
	_, ctx := ktesting.NewTestContext(t)
	m, err := New(Config{
		CgroupRoot: root, CgroupsPerQOS: true, EnforceNodeAllocatable: []string{EnforcePods},
		Capacity: rl("cpu", "2", "memory", "4Gi"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.WithoutCancel(ctx)) })

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cg", Namespace: "default", UID: types.UID(fmt.Sprintf("cg-%08x", rand.Uint32()))},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "app", Image: agenttest.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sleep", "3600"},
			Resources: res(rl("cpu", "100m", "memory", "32Mi"), rl("memory", "64Mi")),
		}}},
	}
	parent, err := m.EnsurePod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	res := rt.SyncPod(ctx, nodekit.SyncPodRequest{
		Pod:     pod,
		Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}},
		Sandbox: nodekit.SandboxOptions{CgroupParent: parent},
	})
	if err := res.Err(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	st, err := rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	c := st.FindContainer("app")
	if c == nil || c.State != nodekit.StateRunning {
		t.Fatalf("container not running: %+v", c)
	}
	containerCgroup := parent + "/" + c.ID.ID
	procs := cgFile(v, "memory", containerCgroup, "cgroup.procs", "cgroup.procs")
	var pids []string
	for deadline := time.Now().Add(10 * time.Second); len(pids) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		pids = strings.Fields(readT(t, procs))
	}
	if len(pids) == 0 || pids[0] == "<missing>" {
		t.Fatalf("no process in %s", procs)
	}
	b, err := os.ReadFile("/proc/" + pids[0] + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), containerCgroup+"\n") {
		t.Fatalf("process %s is not in %s:\n%s", pids[0], containerCgroup, b)
	}
	if got := readT(t, cgFile(v, "memory", parent, "memory.limit_in_bytes", "memory.max")); got != fmt.Sprint(64*mi) {
		t.Errorf("pod memory limit %s, want 64Mi", got)
	}
	if sb := st.Sandboxes; len(sb) == 0 || !exists(cgFile(v, "memory", parent+"/"+sb[0].ID, "", "")) {
		t.Errorf("sandbox cgroup not under %s", parent)
	}
	t.Logf("busybox process %s runs in %s", pids[0], containerCgroup)

	// The agent's order: stop and remove the pod's containers, then
	// destroy its cgroup.
	running := &nodekit.Pod{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace,
		Containers: []*nodekit.Container{{ID: c.ID, Name: c.Name, State: c.State}}}
	for _, sb := range st.Sandboxes {
		running.Sandboxes = append(running.Sandboxes, &nodekit.Container{ID: nodekit.ContainerID{ID: sb.ID}})
	}
	grace := time.Second // sleep as pid 1 ignores SIGTERM
	if err := rt.KillPod(ctx, nodekit.KillPodRequest{Pod: pod, Running: running, GracePeriod: &grace}); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemoveContainer(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	for _, sb := range st.Sandboxes {
		if err := rt.RemovePodSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.DestroyPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	// runc, in the hybrid layout, also made the pod's cgroup in the cgroup2
	// mount: DestroyPod removes it there too.
	for _, dir := range []string{cgFile(v, "memory", parent, "", ""), cgFile(v, "cpu", parent, "", ""), hybridDir(v, parent)} {
		if dir != "" && exists(dir) {
			t.Errorf("pod cgroup %s left", dir)
		}
	}
}
