package allocation_test

import (
	"context"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/allocation"
)

func names(chs []allocation.ContainerChange) []string {
	var out []string
	for _, ch := range chs {
		out = append(out, ch.Name)
	}
	return out
}

func TestPlanResize(t *testing.T) {
	before := podOf("p",
		ctr("up", reqs("cpu=100m,memory=64Mi", "cpu=200m,memory=128Mi")),
		ctr("down", reqs("cpu=400m,memory=256Mi", "cpu=400m,memory=256Mi")),
		ctr("memrestart", reqs("memory=64Mi", "memory=64Mi"), v1.ResourceMemory),
		ctr("same", reqs("cpu=100m", "")),
		ctr("stopped", reqs("cpu=100m", "")),
	)
	actuated := allocation.ForPod(before)
	after := podOf("p",
		ctr("up", reqs("cpu=200m,memory=64Mi", "cpu=400m,memory=256Mi")),
		ctr("down", reqs("cpu=200m,memory=128Mi", "cpu=200m,memory=128Mi")),
		ctr("memrestart", reqs("memory=128Mi", "memory=128Mi"), v1.ResourceMemory),
		ctr("same", reqs("cpu=100m", "")),
		ctr("stopped", reqs("cpu=300m", "")),
	)
	p := allocation.PlanResize(after, actuated, running(after, "up", "down", "memrestart", "same"))
	if got, want := names(p.Memory), []string{"down", "up"}; !reflect.DeepEqual(got, want) {
		t.Errorf("memory updates = %v, want %v (decreases first)", got, want)
	}
	if got, want := names(p.CPU), []string{"down", "up"}; !reflect.DeepEqual(got, want) {
		t.Errorf("cpu updates = %v, want %v", got, want)
	}
	if got, want := names(p.Restart), []string{"memrestart"}; !reflect.DeepEqual(got, want) {
		t.Errorf("restarts = %v, want %v", got, want)
	}
	if got, want := p.NotRunning, []string{"stopped"}; !reflect.DeepEqual(got, want) {
		t.Errorf("not running = %v, want %v", got, want)
	}
	// It ran at its actuated resources: the pod cgroup moves from those.
	if got, want := names(p.Stopped), []string{"stopped"}; !reflect.DeepEqual(got, want) || p.Stopped[0].Current.Requests.Cpu().MilliValue() != 100 {
		t.Errorf("stopped = %v (%+v), want %v from cpu 100m", got, p.Stopped, want)
	}
	if p := allocation.PlanResize(after, actuated, nil); len(p.Stopped) != 0 {
		t.Errorf("no pod running: stopped = %v, want none", names(p.Stopped))
	}

	// A CPU-only change of a container restarting only for memory is in place.
	cpuOnly := podOf("p", ctr("memrestart", reqs("cpu=1,memory=64Mi", "memory=64Mi"), v1.ResourceMemory))
	p = allocation.PlanResize(cpuOnly, allocation.ForPod(podOf("p", ctr("memrestart", reqs("memory=64Mi", "memory=64Mi")))), running(cpuOnly, "memrestart"))
	if len(p.Restart) != 0 || len(p.CPU) != 1 {
		t.Errorf("cpu change with memory RestartContainer: restart=%v cpu=%v, want one in-place cpu update", names(p.Restart), names(p.CPU))
	}
	if p := allocation.PlanResize(before, actuated, running(before, "up")); !p.Empty() {
		t.Errorf("no change planned %+v, want empty", p)
	}
}

func actuator(rec *recorder) (*allocation.Actuator, *allocation.Store) {
	s, _ := allocation.OpenStore("", allocation.ActuatedFile)
	return &allocation.Actuator{Containers: rec, PodCgroup: rec, Usage: rec, PodUsage: rec, Actuated: s}, s
}

func TestActuatorOrder(t *testing.T) {
	small := reqs("cpu=100m,memory=64Mi", "cpu=100m,memory=64Mi")
	big := reqs("cpu=200m,memory=128Mi", "cpu=200m,memory=128Mi")
	cases := []struct {
		name     string
		from, to v1.ResourceRequirements
		want     []string
	}{
		{
			name: "increase: pod cgroup before the container, memory then cpu",
			from: small, to: big,
			want: []string{
				"pod cpu=100m mem=128Mi", "id-c cpu=100m/100m mem=128Mi/128Mi",
				"pod cpu=200m mem=128Mi", "id-c cpu=200m/200m mem=128Mi/128Mi",
			},
		},
		{
			name: "decrease: pod cgroup after the container",
			from: big, to: small,
			want: []string{
				"id-c cpu=200m/200m mem=64Mi/64Mi", "pod cpu=200m mem=64Mi",
				"id-c cpu=100m/100m mem=64Mi/64Mi", "pod cpu=100m mem=64Mi",
			},
		},
		{
			// As upstream: the pod's CPU request grows first with its
			// limit kept, the limit shrinks after the container's (cgroup
			// v1 refuses a pod quota below a running container's).
			name: "cpu request up, limit down: the pod's limit after the container",
			from: reqs("cpu=100m,memory=64Mi", "cpu=400m,memory=64Mi"), to: reqs("cpu=200m,memory=64Mi", "cpu=200m,memory=64Mi"),
			want: []string{
				"pod cpu=400m mem=64Mi", "id-c cpu=200m/200m mem=64Mi/64Mi", "pod cpu=200m mem=64Mi",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{usage: map[string]uint64{"id-c": 1 << 20}, podUsage: 2 << 20}
			a, s := actuator(rec)
			pod := podOf("p", ctr("c", tc.to))
			restart, err := a.Run(context.Background(), pod, allocation.PlanResize(pod, allocation.ForPod(podOf("p", ctr("c", tc.from))), running(pod, "c")))
			if err != nil || len(restart) != 0 {
				t.Fatalf("Run = %v, %v; want no restart, no error", restart, err)
			}
			if !reflect.DeepEqual(rec.calls, tc.want) {
				t.Fatalf("calls:\n%q\nwant\n%q", rec.calls, tc.want)
			}
			got, _ := s.Get(pod.UID)
			if !reflect.DeepEqual(allocation.PlanResize(pod, got, running(pod, "c")), allocation.Plan{}) {
				t.Fatalf("actuated after Run = %v, want the allocation", got.ContainerResources)
			}
		})
	}
}

func TestActuatorMemoryBelowUsage(t *testing.T) {
	rec := &recorder{usage: map[string]uint64{"id-c": 100 << 20}}
	a, _ := actuator(rec)
	pod := podOf("p", ctr("c", reqs("memory=10Ki", "memory=10Ki")))
	plan := allocation.PlanResize(pod, allocation.ForPod(podOf("p", ctr("c", reqs("memory=256Mi", "memory=256Mi")))), running(pod, "c"))
	_, err := a.Run(context.Background(), pod, plan)
	if err == nil {
		t.Fatal("Run succeeded, want an error for a limit below usage")
	}
	if !regexp.MustCompile(`memory limit \(\d+\) below current usage`).MatchString(err.Error()) {
		t.Fatalf("error %q does not say the limit is below usage (the e2e spec's regexp)", err)
	}
	if len(rec.calls) != 0 {
		t.Fatalf("calls %q made before the check failed, want none", rec.calls)
	}
}

func TestActuatorRestart(t *testing.T) {
	rec := &recorder{}
	a, s := actuator(rec)
	pod := podOf("p", ctr("c", reqs("memory=128Mi", "memory=128Mi"), v1.ResourceMemory))
	plan := allocation.PlanResize(pod, allocation.ForPod(podOf("p", ctr("c", reqs("memory=64Mi", "memory=64Mi")))), running(pod, "c"))
	restart, err := a.Run(context.Background(), pod, plan)
	if err != nil || !reflect.DeepEqual(restart, []string{"c"}) {
		t.Fatalf("Run = %v, %v; want restart [c]", restart, err)
	}
	if want := []string{"pod cpu=0 mem=128Mi"}; !reflect.DeepEqual(rec.calls, want) {
		t.Fatalf("calls %q, want %q (the pod cgroup only; the container restarts)", rec.calls, want)
	}
	got, _ := s.Get(pod.UID)
	lim := got.ContainerResources["c"].Limits
	if q := lim.Memory(); q.Value() != 128<<20 {
		t.Fatalf("actuated memory limit %v, want 128Mi", q)
	}
}

// TestActuatorPodLevel: a resize of the pod-level resources grows the pod
// cgroup before the containers and shrinks it after them, per resource,
// as upstream; a container without limits of its own is updated to the
// new pod-level limits (it runs with them), one with its own is not.
func TestActuatorPodLevel(t *testing.T) {
	small := podLevel("cpu=200m,memory=64Mi", "cpu=200m,memory=64Mi")
	big := podLevel("cpu=400m,memory=128Mi", "cpu=400m,memory=128Mi")
	own := reqs("cpu=50m,memory=16Mi", "cpu=100m,memory=32Mi")
	cases := []struct {
		name     string
		from, to *v1.ResourceRequirements
		c        v1.ResourceRequirements
		want     []string
	}{
		{
			name: "grow, container inheriting the limits",
			from: small, to: big,
			want: []string{
				"pod cpu=200m mem=128Mi", "id-c cpu=0/200m mem=0/128Mi",
				"pod cpu=400m mem=128Mi", "id-c cpu=0/400m mem=0/128Mi",
			},
		},
		{
			name: "shrink, container inheriting the limits",
			from: big, to: small,
			want: []string{
				"id-c cpu=0/400m mem=0/64Mi", "pod cpu=400m mem=64Mi",
				"id-c cpu=0/200m mem=0/64Mi", "pod cpu=200m mem=64Mi",
			},
		},
		{
			name: "grow, container with its own limits: the pod cgroup only",
			from: small, to: big, c: own,
			want: []string{"pod cpu=200m mem=128Mi", "pod cpu=400m mem=128Mi"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{usage: map[string]uint64{"id-c": 1 << 20}, podUsage: 2 << 20}
			a, s := actuator(rec)
			before := podOf("p", ctr("c", tc.c))
			before.Spec.Resources = tc.from
			pod := podOf("p", ctr("c", tc.c))
			pod.Spec.Resources = tc.to
			if err := s.Set(pod.UID, allocation.ForPod(before)); err != nil {
				t.Fatal(err)
			}
			plan := allocation.PlanResize(pod, allocation.ForPod(before), running(pod, "c"))
			if !plan.PodLevel {
				t.Fatal("plan does not see the pod-level change")
			}
			restart, err := a.Run(context.Background(), pod, plan)
			if err != nil || len(restart) != 0 {
				t.Fatalf("Run = %v, %v; want no restart, no error", restart, err)
			}
			if !reflect.DeepEqual(rec.calls, tc.want) {
				t.Fatalf("calls:\n%q\nwant\n%q", rec.calls, tc.want)
			}
			got, _ := s.Get(pod.UID)
			if p := allocation.PlanResize(pod, got, running(pod, "c")); !p.Empty() {
				t.Fatalf("plan after Run = %+v, want empty (pod-level %v actuated)", p, got.PodLevelResources)
			}
		})
	}
}

// TestActuatorPodLevelRestart: a container without limits of its own
// whose resizePolicy restarts it for CPU is restarted when the pod-level
// CPU limit changes, as the upstream spec "only pod-level cpu" with "cpu
// restart" expects.
func TestActuatorPodLevelRestart(t *testing.T) {
	before := podOf("p", ctr("c", v1.ResourceRequirements{}, v1.ResourceCPU))
	before.Spec.Resources = podLevel("cpu=200m", "cpu=200m")
	pod := podOf("p", ctr("c", v1.ResourceRequirements{}, v1.ResourceCPU))
	pod.Spec.Resources = podLevel("cpu=400m", "cpu=400m")
	plan := allocation.PlanResize(pod, allocation.ForPod(before), running(pod, "c"))
	if got := names(plan.Restart); !reflect.DeepEqual(got, []string{"c"}) {
		t.Fatalf("restarts = %v, want [c]", got)
	}
	// Memory is not a pod-level resource here: a memory-only RestartContainer
	// policy keeps the container.
	mem := podOf("p", ctr("c", v1.ResourceRequirements{}, v1.ResourceMemory))
	mem.Spec.Resources = pod.Spec.Resources
	memBefore := podOf("p", ctr("c", v1.ResourceRequirements{}, v1.ResourceMemory))
	memBefore.Spec.Resources = before.Spec.Resources
	plan = allocation.PlanResize(mem, allocation.ForPod(memBefore), running(mem, "c"))
	if len(plan.Restart) != 0 || len(plan.CPU) != 1 {
		t.Fatalf("memory-restart container on a cpu change: restart=%v cpu=%v, want one in-place cpu update", names(plan.Restart), names(plan.CPU))
	}
}

// TestActuatorPodMemoryBelowUsage: lowering the pod-level memory limit
// below the pod cgroup's usage is refused before anything changes, with
// upstream's message for the pod and for the container inheriting it.
func TestActuatorPodMemoryBelowUsage(t *testing.T) {
	rec := &recorder{usage: map[string]uint64{"id-c": 1 << 20}, podUsage: 2 << 20}
	a, _ := actuator(rec)
	before := podOf("p", ctr("c", v1.ResourceRequirements{}))
	before.Spec.Resources = podLevel("memory=256Mi", "memory=256Mi")
	pod := podOf("p", ctr("c", v1.ResourceRequirements{}))
	pod.Spec.Resources = podLevel("memory=10Ki", "memory=10Ki")
	_, err := a.Run(context.Background(), pod, allocation.PlanResize(pod, allocation.ForPod(before), running(pod, "c")))
	if err == nil {
		t.Fatal("Run succeeded, want an error for a limit below usage")
	}
	for _, want := range []string{
		"attempting to set pod memory limit (10240) below current usage (2097152)",
		`attempting to set container "c" memory limit (10240) below current usage (1048576)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if len(rec.calls) != 0 {
		t.Fatalf("calls %q made before the check failed, want none", rec.calls)
	}
}

// TestActuatorTellsRuntimeFirst: with a ready sandbox the runtime is told
// the pod's new totals (without overhead) before each pod cgroup change,
// as upstream; its refusal rejects the step before the cgroup is touched;
// a failed cgroup write tells it the old totals again.
func TestActuatorTellsRuntimeFirst(t *testing.T) {
	small := reqs("cpu=100m,memory=64Mi", "cpu=100m,memory=64Mi")
	big := reqs("cpu=200m,memory=128Mi", "cpu=200m,memory=128Mi")
	run := func(rec *recorder) error {
		s, _ := allocation.OpenStore("", allocation.ActuatedFile)
		a := &allocation.Actuator{Containers: rec, PodCgroup: rec, Sandbox: rec, Actuated: s}
		pod := podOf("p", ctr("c", big))
		pod.Spec.Overhead = list("cpu=50m,memory=10Mi")
		rs := running(pod, "c")
		rs.Sandboxes = []*nodekit.SandboxStatus{{ID: "old", State: nodekit.SandboxNotReady}, {ID: "sb1", State: nodekit.SandboxReady}}
		_, err := a.Run(context.Background(), pod, allocation.PlanResize(pod, allocation.ForPod(podOf("p", ctr("c", small))), rs))
		return err
	}
	rec := &recorder{}
	if err := run(rec); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"sandbox sb1 cpu=100m/100m mem=128Mi/128Mi", "pod cpu=100m mem=128Mi", "id-c cpu=100m/100m mem=128Mi/128Mi",
		"sandbox sb1 cpu=200m/200m mem=128Mi/128Mi", "pod cpu=200m mem=128Mi", "id-c cpu=200m/200m mem=128Mi/128Mi",
	}
	if !reflect.DeepEqual(rec.calls, want) {
		t.Fatalf("calls:\n%q\nwant\n%q", rec.calls, want)
	}

	rec = &recorder{sandboxErr: errors.New("runtime says no")}
	if err := run(rec); err == nil || !strings.Contains(err.Error(), "UpdatePodSandboxResources (resource=memory); resize rejected: runtime says no") {
		t.Fatalf("Run with a refusing runtime = %v", err)
	}
	if want := []string{"sandbox sb1 cpu=100m/100m mem=128Mi/128Mi"}; !reflect.DeepEqual(rec.calls, want) {
		t.Fatalf("calls %q, want %q (nothing after the refusal)", rec.calls, want)
	}

	rec = &recorder{podErr: errors.New("cgroup write failed")}
	if err := run(rec); err == nil || !strings.Contains(err.Error(), "cgroup write failed") {
		t.Fatalf("Run with a failing pod cgroup = %v", err)
	}
	want = []string{"sandbox sb1 cpu=100m/100m mem=128Mi/128Mi", "pod cpu=100m mem=128Mi", "sandbox sb1 cpu=100m/100m mem=64Mi/64Mi"}
	if !reflect.DeepEqual(rec.calls, want) {
		t.Fatalf("calls:\n%q\nwant\n%q (the old totals told again)", rec.calls, want)
	}
}
