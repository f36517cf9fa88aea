package allocation_test

import (
	"context"
	"reflect"
	"regexp"
	"testing"

	v1 "k8s.io/api/core/v1"

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
	return &allocation.Actuator{Containers: rec, PodCgroup: rec, Usage: rec, Actuated: s}, s
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{usage: map[string]uint64{"id-c": 1 << 20}}
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
