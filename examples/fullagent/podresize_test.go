package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/agenttest"
)

// podCgroupFile reads file of the controller's pod cgroup (cgroup v1):
// the parent of the cgroup container runs in.
func podCgroupFile(t *testing.T, e *env, p *v1.Pod, container, controller, file string) string {
	t.Helper()
	for _, line := range strings.Split(e.exec(t, p, container, "cat", "/proc/self/cgroup"), "\n") {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != controller {
				continue
			}
			dir := filepath.Dir(parts[2])
			if !strings.HasSuffix(dir, "/pod"+string(p.UID)) {
				t.Fatalf("container %s's %s cgroup %s is not in its pod's cgroup", container, controller, parts[2])
			}
			b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, dir, file))
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("no %s cgroup for container %s", controller, container)
	return ""
}

// podCgroupStatus is the pod's status.resources as its pod cgroup's files
// give them (cgroup v1), converted as upstream reads them back: cpu.shares
// to a CPU request rounded up, the CFS quota over its period to a CPU
// limit, memory.limit_in_bytes; the memory request is the spec's.
func podCgroupStatus(t *testing.T, e *env, p *v1.Pod, container string) *v1.ResourceRequirements {
	t.Helper()
	num := func(controller, file string) int64 {
		v, err := strconv.ParseInt(podCgroupFile(t, e, p, container, controller, file), 10, 64)
		if err != nil {
			t.Fatalf("pod cgroup %s: %v", file, err)
		}
		return v
	}
	shares, quota, period := num("cpu", "cpu.shares"), num("cpu", "cpu.cfs_quota_us"), num("cpu", "cpu.cfs_period_us")
	return &v1.ResourceRequirements{
		Requests: v1.ResourceList{
			v1.ResourceCPU:    *resource.NewMilliQuantity((shares*1000+1023)/1024, resource.DecimalSI),
			v1.ResourceMemory: p.Spec.Resources.Requests[v1.ResourceMemory],
		},
		Limits: v1.ResourceList{
			v1.ResourceCPU:    *resource.NewMilliQuantity(quota*1000/period, resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(num("memory", "memory.limit_in_bytes"), resource.BinarySI),
		},
	}
}

func podLevelResources(cpuReq, cpuLim, memReq, memLim string) *v1.ResourceRequirements {
	r := resizeResources(cpuReq, cpuLim, memReq, memLim)
	return &r
}

// resizedTo reports whether the API shows the pod-level resize to want
// done: observedGeneration caught up, no resize condition, and
// status.resources and status.allocatedResources at want (the checks of
// upstream's "PLR Pod InPlace Resize" specs).
func resizedTo(want *v1.ResourceRequirements) func(*v1.Pod) bool {
	return func(p *v1.Pod) bool {
		return p.Status.ObservedGeneration >= p.Generation && !hasResizeCondition(p) &&
			apiequality.Semantic.DeepEqual(p.Status.Resources, want) &&
			apiequality.Semantic.DeepEqual(p.Status.AllocatedResources, want.Requests)
	}
}

// TestInPlaceResizePodLevel: a running pod whose only resources are
// pod-level (spec.resources) is resized through its resize subresource,
// up and then down. Its container, which has no limits of its own, runs
// with the pod-level ones, and both its cgroup and the pod cgroup follow
// each resize (cgroup v1: cpu.cfs_quota_us, memory.limit_in_bytes)
// without a restart; the status reports the pod's resources and
// allocatedResources (status.resources as read back from the pod
// cgroup), the container's none, and no resize condition. A
// memory limit below the pod's usage then stays PodResizeInProgress with
// reason Error and upstream's message, the cgroups unchanged.
func TestInPlaceResizePodLevel(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		agenttest.RequireIntegration(t, "the cgroup v1 memory hierarchy", err)
	}
	e := startEnv(t)
	pod := simplePod("plr", v1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.Resources = podLevelResources("100m", "200m", "32Mi", "64Mi")
	e.createPod(t, pod)
	p := e.waitPod(t, "plr", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	appID := containerStatus(p, "app").ContainerID
	check := func(what, quota, memory string) {
		t.Helper()
		for _, f := range []struct{ where, controller, file, got, want string }{
			{"app's", "cpu", "cpu.cfs_quota_us", cgroupFile(t, e, p, "app", "cpu", "cpu.cfs_quota_us"), quota},
			{"app's", "memory", "memory.limit_in_bytes", cgroupFile(t, e, p, "app", "memory", "memory.limit_in_bytes"), memory},
			{"the pod's", "cpu", "cpu.cfs_quota_us", podCgroupFile(t, e, p, "app", "cpu", "cpu.cfs_quota_us"), quota},
			{"the pod's", "memory", "memory.limit_in_bytes", podCgroupFile(t, e, p, "app", "memory", "memory.limit_in_bytes"), memory},
		} {
			if f.got != f.want {
				t.Errorf("%s: %s %s = %s, want %s", what, f.where, f.file, f.got, f.want)
			}
		}
	}
	check("before the resize", "20000", "67108864")

	resize := func(r *v1.ResourceRequirements) time.Time {
		t.Helper()
		patch := `{"spec":{"resources":{"requests":{"cpu":"` + r.Requests.Cpu().String() + `","memory":"` + r.Requests.Memory().String() +
			`"},"limits":{"cpu":"` + r.Limits.Cpu().String() + `","memory":"` + r.Limits.Memory().String() + `"}}}}`
		if _, err := e.client.CoreV1().Pods("default").Patch(t.Context(), "plr", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
			t.Fatalf("resize to %s: %v", patch, err)
		}
		return time.Now()
	}
	for _, step := range []struct {
		name          string
		to            *v1.ResourceRequirements
		quota, memory string
	}{
		{"up", podLevelResources("200m", "400m", "48Mi", "128Mi"), "40000", "134217728"},
		{"down", podLevelResources("100m", "100m", "32Mi", "48Mi"), "10000", "50331648"},
	} {
		start := resize(step.to)
		p = e.waitPod(t, "plr", 90*time.Second, "resized "+step.name, resizedTo(step.to))
		t.Logf("pod-level resize %s reported in %v", step.name, time.Since(start).Round(time.Millisecond))
		check("after the resize "+step.name, step.quota, step.memory)
		// status.resources are read back from the pod cgroup.
		if want := podCgroupStatus(t, e, p, "app"); !apiequality.Semantic.DeepEqual(p.Status.Resources, want) {
			t.Errorf("after the resize %s: status.resources = %v, want the pod cgroup's %v", step.name, p.Status.Resources, want)
		}
		app := containerStatus(p, "app")
		if app.RestartCount != 0 || app.ContainerID != appID {
			t.Fatalf("app restarted: restartCount %d, id %s (was %s)", app.RestartCount, app.ContainerID, appID)
		}
		if app.Resources == nil || len(app.Resources.Limits) != 0 || len(app.Resources.Requests) != 0 || len(app.AllocatedResources) != 0 {
			t.Errorf("app's resources %v, allocatedResources %v; want none (its limits are the pod's)", app.Resources, app.AllocatedResources)
		}
	}

	// Below what the pod uses: refused when applied, as upstream's spec
	// "decrease pod-level memory limit below usage".
	resize(podLevelResources("50m", "100m", "10Ki", "10Ki")) // requests below limits: still Burstable
	msg := regexp.MustCompile(`memory limit \(\d+\) below current usage`)
	p = e.waitPod(t, "plr", 90*time.Second, "PodResizeInProgress Error", func(p *v1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodResizeInProgress && c.Reason == v1.PodReasonError && msg.MatchString(c.Message) {
				return true
			}
		}
		return false
	})
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodResizePending {
			t.Errorf("PodResizePending %s %q beside the in-progress error, want none", c.Reason, c.Message)
		}
		if c.Type == v1.PodResizeInProgress {
			t.Logf("PodResizeInProgress %s: %s", c.Reason, c.Message)
		}
	}
	check("after the refused resize", "10000", "50331648")
	if q := p.Status.Resources.Limits.Memory(); q.Value() != 48<<20 {
		t.Errorf("status.resources.limits.memory after the refused resize = %v, want the applied 48Mi", q)
	}
}

// TestInPlaceResizePodLevelRestart: a pod with pod-level resources and a
// container with CPU limits of its own whose CPU resizePolicy is
// RestartContainer is resized down, pod and container together (upstream's
// "PLR ... resize policy cpu restart" specs). The container is stopped
// before the pod cgroup shrinks (cgroup v1 refuses a pod CPU quota below a
// running container's), then starts once at the new size; both cgroups
// follow and no resize condition is left.
func TestInPlaceResizePodLevelRestart(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err != nil {
		agenttest.RequireIntegration(t, "the cgroup v1 cpu hierarchy", err)
	}
	e := startEnv(t)
	pod := simplePod("plrrestart", v1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.Resources = podLevelResources("40m", "40m", "64Mi", "64Mi")
	pod.Spec.Containers[0].Resources = resizeResources("40m", "40m", "64Mi", "64Mi")
	pod.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceCPU, RestartPolicy: v1.RestartContainer}}
	e.createPod(t, pod)
	p := e.waitPod(t, "plrrestart", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	appID := containerStatus(p, "app").ContainerID
	if got := podCgroupFile(t, e, p, "app", "cpu", "cpu.cfs_quota_us"); got != "4000" {
		t.Fatalf("pod cpu.cfs_quota_us before the resize = %s, want 4000", got)
	}
	r := `{"requests":{"cpu":"30m","memory":"64Mi"},"limits":{"cpu":"30m","memory":"64Mi"}}`
	patch := `{"spec":{"resources":` + r + `,"containers":[{"name":"app","resources":` + r + `}]}}`
	if _, err := e.client.CoreV1().Pods("default").Patch(t.Context(), "plrrestart", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("resize: %v", err)
	}
	p = e.waitPod(t, "plrrestart", 90*time.Second, "restarted at 30m", func(p *v1.Pod) bool {
		app := containerStatus(p, "app")
		return p.Status.ObservedGeneration >= p.Generation && !hasResizeCondition(p) && app != nil &&
			app.RestartCount == 1 && app.State.Running != nil && app.Resources != nil && app.Resources.Limits.Cpu().MilliValue() == 30
	})
	if app := containerStatus(p, "app"); app.ContainerID == appID {
		t.Errorf("app not restarted: id %s", app.ContainerID)
	}
	for _, f := range []struct{ where, got string }{
		{"app's", cgroupFile(t, e, p, "app", "cpu", "cpu.cfs_quota_us")},
		{"the pod's", podCgroupFile(t, e, p, "app", "cpu", "cpu.cfs_quota_us")},
	} {
		if f.got != "3000" {
			t.Errorf("%s cpu.cfs_quota_us after the resize = %s, want 3000", f.where, f.got)
		}
	}
}
