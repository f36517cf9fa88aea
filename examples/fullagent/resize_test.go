package main

import (
	"context"
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
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agenttest"
)

// cgroupFile reads file of the controller's cgroup (cgroup v1) that a
// container runs in: the path from the container's /proc/self/cgroup,
// the file from the host.
func cgroupFile(t *testing.T, e *env, p *v1.Pod, container, controller, file string) string {
	t.Helper()
	for _, line := range strings.Split(e.exec(t, p, container, "cat", "/proc/self/cgroup"), "\n") {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, parts[2], file))
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(string(b))
			}
		}
	}
	t.Fatalf("no %s cgroup for container %s", controller, container)
	return ""
}

func resizeResources(cpuReq, cpuLim, memReq, memLim string) v1.ResourceRequirements {
	q := resource.MustParse
	return v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: q(cpuReq), v1.ResourceMemory: q(memReq)},
		Limits:   v1.ResourceList{v1.ResourceCPU: q(cpuLim), v1.ResourceMemory: q(memLim)},
	}
}

func hasResizeCondition(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodResizePending || c.Type == v1.PodResizeInProgress {
			return true
		}
	}
	return false
}

// TestInPlaceResize: a running pod is resized through its resize
// subresource. Container app (no resizePolicy: NotRequired) gets its new
// CPU quota and memory limit in its cgroup without a restart; container
// side, whose memory policy is RestartContainer, restarts once. The pod
// cgroup follows, and the status reports allocatedResources and
// resources with no resize condition left.
func TestInPlaceResize(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		agenttest.RequireIntegration(t, "the cgroup v1 memory hierarchy", err)
	}
	e := startEnv(t)
	pod := simplePod("resize", v1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.Containers[0].Resources = resizeResources("100m", "200m", "32Mi", "64Mi")
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
		Name: "side", Command: []string{"sh", "-c", "sleep 3600"},
		Resources:    resizeResources("100m", "200m", "32Mi", "64Mi"),
		ResizePolicy: []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}},
	})
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(2)) // sh ignores SIGTERM: side's restart waits this long
	e.createPod(t, pod)
	p := e.waitPod(t, "resize", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if got := cgroupFile(t, e, p, "app", "cpu", "cpu.cfs_quota_us"); got != "20000" {
		t.Fatalf("app's cpu.cfs_quota_us before the resize = %s, want 20000", got)
	}
	appID := containerStatus(p, "app").ContainerID

	patch := `{"spec":{"containers":[` +
		`{"name":"app","resources":{"requests":{"cpu":"200m","memory":"48Mi"},"limits":{"cpu":"400m","memory":"128Mi"}}},` +
		`{"name":"side","resources":{"requests":{"cpu":"100m","memory":"48Mi"},"limits":{"cpu":"200m","memory":"128Mi"}}}]}}`
	start := time.Now()
	if _, err := e.client.CoreV1().Pods("default").Patch(t.Context(), "resize", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("resize: %v", err)
	}
	e.waitPod(t, "resize", 60*time.Second, "app resized", func(p *v1.Pod) bool {
		app := containerStatus(p, "app")
		return app != nil && app.Resources != nil && app.Resources.Limits.Memory().Value() == 128<<20
	})
	t.Logf("app's resize reported in %v", time.Since(start).Round(time.Millisecond))
	p = e.waitPod(t, "resize", 60*time.Second, "side restarted, no resize condition", func(p *v1.Pod) bool {
		side := containerStatus(p, "side")
		return side != nil && side.RestartCount == 1 && side.State.Running != nil && !hasResizeCondition(p)
	})
	t.Logf("side's restart and the end of the resize reported in %v", time.Since(start).Round(time.Millisecond))
	app := containerStatus(p, "app")
	if app.RestartCount != 0 || app.ContainerID != appID {
		t.Fatalf("app restarted: restartCount %d, id %s (was %s)", app.RestartCount, app.ContainerID, appID)
	}
	if a := app.AllocatedResources; a.Cpu().MilliValue() != 200 || a.Memory().Value() != 48<<20 {
		t.Fatalf("app allocatedResources = %v, want cpu 200m memory 48Mi", a)
	}
	if got := cgroupFile(t, e, p, "app", "cpu", "cpu.cfs_quota_us"); got != "40000" {
		t.Errorf("app's cpu.cfs_quota_us = %s, want 40000 (400m)", got)
	}
	if got := cgroupFile(t, e, p, "app", "cpu", "cpu.shares"); got != "204" {
		t.Errorf("app's cpu.shares = %s, want 204 (200m)", got)
	}
	if got := cgroupFile(t, e, p, "app", "memory", "memory.limit_in_bytes"); got != "134217728" {
		t.Errorf("app's memory.limit_in_bytes = %s, want 134217728 (128Mi)", got)
	}
	if got := cgroupFile(t, e, p, "side", "memory", "memory.limit_in_bytes"); got != "134217728" {
		t.Errorf("side's memory.limit_in_bytes after its restart = %s, want 134217728", got)
	}
	// The pod cgroup: the parent of app's memory cgroup.
	cg := memoryCgroupOf(t, e, p)
	podDir := "/kubepods/burstable/pod" + string(p.UID) + "/"
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", cg[:strings.Index(cg, podDir)+len(podDir)], "memory.limit_in_bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != "268435456" {
		t.Errorf("pod cgroup memory limit = %s, want 268435456 (2 x 128Mi)", got)
	}
	checkResizeMetrics(t, e)
}

// checkResizeMetrics checks kubelet's resize series after TestInPlaceResize's
// resize: each raised limit counted (both memory limits, app's CPU limit), the actuations
// timed, and no resize left in progress.
func checkResizeMetrics(t *testing.T, e *env) {
	t.Helper()
	m, err := e.scrape(t.Context(), "metrics")
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		`kubelet_container_requested_resizes_total{operation="increase",requirement="limits",resource="memory"}`: 2,
		`kubelet_container_requested_resizes_total{operation="increase",requirement="limits",resource="cpu"}`:    1,
		`kubelet_pod_in_progress_resizes`: 0,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if n := m[`kubelet_pod_resize_duration_milliseconds_count{success="true"}`]; n < 1 {
		t.Errorf("kubelet_pod_resize_duration_milliseconds_count{success=\"true\"} = %v, want at least 1", n)
	}
}

// TestResizeAcrossAgentKill: the agent is killed with SIGKILL, a running
// pod is resized while no agent runs, and the agent started again on the
// same root dir applies the resize in place. Its allocation checkpoint
// says the container still has the old resources; without it the new
// agent would take the resized spec as what the container already has.
func TestResizeAcrossAgentKill(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		agenttest.RequireIntegration(t, "the cgroup v1 memory hierarchy", err)
	}
	e := startProcEnv(t)
	pod := simplePod("resize", v1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.Containers[0].Resources = resizeResources("100m", "200m", "32Mi", "64Mi")
	e.createPod(t, pod)
	p := e.waitPod(t, "resize", 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	appID := containerStatus(p, "app").ContainerID
	if got := cgroupFile(t, e.env, p, "app", "memory", "memory.limit_in_bytes"); got != "67108864" {
		t.Fatalf("memory.limit_in_bytes before the resize = %s, want 67108864", got)
	}
	if _, err := os.Stat(filepath.Join(e.root, "allocated_pods_state")); err != nil {
		t.Fatalf("no allocation checkpoint in the root dir: %v", err)
	}

	e.agent.kill()
	patch := `{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"200m","memory":"48Mi"},"limits":{"cpu":"400m","memory":"128Mi"}}}]}}`
	if _, err := e.client.CoreV1().Pods("default").Patch(t.Context(), "resize", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("resize: %v", err)
	}
	restartAt := time.Now()
	e.agent.start()
	p = e.waitPod(t, "resize", 90*time.Second, "resized", func(p *v1.Pod) bool {
		app := containerStatus(p, "app")
		return app != nil && app.Resources != nil && app.Resources.Limits.Memory().Value() == 128<<20 && !hasResizeCondition(p)
	})
	t.Logf("resize applied and reported %v after the restart", time.Since(restartAt).Round(time.Millisecond))
	if app := containerStatus(p, "app"); app.RestartCount != 0 || app.ContainerID != appID {
		t.Fatalf("app restarted: restartCount %d, id %s (was %s)", app.RestartCount, app.ContainerID, appID)
	}
	if got := cgroupFile(t, e.env, p, "app", "memory", "memory.limit_in_bytes"); got != "134217728" {
		t.Errorf("memory.limit_in_bytes after the restart = %s, want 134217728 (128Mi)", got)
	}
	if got := cgroupFile(t, e.env, p, "app", "cpu", "cpu.cfs_quota_us"); got != "40000" {
		t.Errorf("cpu.cfs_quota_us after the restart = %s, want 40000 (400m)", got)
	}
}

// TestResizeDeferredUntilPodLeaves: a resize that does not fit beside
// another pod's CPU request is PodResizePending Deferred with the
// resource fit's message, the container keeps its resources, and once
// the other pod is gone the resize is applied in place. The pod has
// upstream's ResizeDeferred, ResizeStarted and ResizeCompleted events.
func TestResizeDeferredUntilPodLeaves(t *testing.T) {
	e := startEnv(t)
	var alloc int64
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		node, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		alloc = node.Status.Allocatable.Cpu().MilliValue()
		return alloc > 0, nil
	})
	if err != nil {
		t.Fatal("the node was not registered with allocatable CPU")
	}
	// hog leaves 300m: grow's 100m fits, 800m does not.
	hogCPU := alloc - 300
	hog := simplePod("hog", v1.RestartPolicyAlways, "sleep 3600")
	hog.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	hog.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(hogCPU, resource.DecimalSI)}
	grow := simplePod("grow", v1.RestartPolicyAlways, "sleep 3600")
	grow.Spec.Containers[0].Resources = resizeResources("100m", "100m", "32Mi", "32Mi")
	e.createPod(t, hog)
	e.createPod(t, grow)
	isRunning := func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning }
	e.waitPod(t, "hog", 60*time.Second, "Running", isRunning)
	e.waitPod(t, "grow", 60*time.Second, "Running", isRunning)

	patch := `{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"800m"},"limits":{"cpu":"800m"}}}]}}`
	if _, err := e.client.CoreV1().Pods("default").Patch(t.Context(), "grow", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("resize: %v", err)
	}
	g := e.waitPod(t, "grow", 60*time.Second, "PodResizePending", func(p *v1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodResizePending {
				return true
			}
		}
		return false
	})
	for _, c := range g.Status.Conditions {
		if c.Type == v1.PodResizePending && (c.Reason != v1.PodReasonDeferred || !strings.HasPrefix(c.Message, fmt.Sprintf("Node didn't have enough resource: cpu, requested: 800, used: %d,", hogCPU))) {
			t.Fatalf("PodResizePending %s %q, want Deferred with the cpu fit's message", c.Reason, c.Message)
		}
	}
	if got := cgroupFile(t, e, g, "app", "cpu", "cpu.cfs_quota_us"); got != "10000" {
		t.Fatalf("cpu.cfs_quota_us while deferred = %s, want 10000 (100m)", got)
	}
	e.waitEvent(t, "grow", "ResizeDeferred", `Pod resize Deferred: {"containers":[{"name":"app","resources":{"limits":{"cpu":"800m"`)

	deleted := time.Now()
	if err := e.client.CoreV1().Pods("default").Delete(t.Context(), "hog", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	g = e.waitPod(t, "grow", 60*time.Second, "resized after hog left", func(p *v1.Pod) bool {
		app := containerStatus(p, "app")
		return app != nil && app.Resources != nil && app.Resources.Limits.Cpu().MilliValue() == 800 && !hasResizeCondition(p)
	})
	t.Logf("deferred resize applied %v after the other pod's deletion", time.Since(deleted).Round(time.Millisecond))
	if got := cgroupFile(t, e, g, "app", "cpu", "cpu.cfs_quota_us"); got != "80000" {
		t.Errorf("cpu.cfs_quota_us after the resize = %s, want 80000 (800m)", got)
	}
	if app := containerStatus(g, "app"); app.RestartCount != 0 {
		t.Errorf("app restarted %d times, want 0", app.RestartCount)
	}
	gen := fmt.Sprintf(`"generation":%d}`, g.Generation)
	e.waitEvent(t, "grow", "ResizeStarted", gen)
	e.waitEvent(t, "grow", "ResizeCompleted", gen)
}
