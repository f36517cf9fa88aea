package syncloop_test

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/internal/scenario"
)

// nodeOptions reads "node resize cpu=Q memory=Q": a node with in-place
// resize and that allocatable (110 pods).
func nodeOptions(t *testing.T, c *scenario.Command) agenttest.SimOptions {
	var opts agenttest.SimOptions
	if !c.Has("resize") {
		t.Fatalf("%s: node: only \"node resize cpu=Q memory=Q\" is known", c.Pos)
	}
	opts.InPlaceResize = true
	opts.Allocatable = v1.ResourceList{v1.ResourcePods: resource.MustParse("110")}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		v, ok := c.Arg(string(name))
		if !ok {
			t.Fatalf("%s: node resize: %s= is required", c.Pos, name)
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			t.Fatalf("%s: %s=%q: %v", c.Pos, name, v, err)
		}
		opts.Allocatable[name] = q
	}
	return opts
}

// doResize runs the resize commands; false for any other command.
func (s *scenarioNode) doResize(c *scenario.Command) (string, bool) {
	switch c.Name {
	case "resize":
		p := s.pod(c).DeepCopy()
		p.Generation++
		setResources(s.t, c, &p.Spec)
		s.pods[p.Name] = p
		s.n.UpdatePod(p)
		return "", true
	case "resize-status":
		return s.resizeStatus(s.pod(c)), true
	case "resized":
		p := s.pod(c)
		name, _ := c.Arg("container")
		calls, ok := s.n.Runtime().Resizes(p.UID, name)
		if !ok {
			return "no container " + name, true
		}
		if len(calls) == 0 {
			return "not resized", true
		}
		var lines []string
		for _, r := range calls {
			lines = append(lines, "resized to "+resources(r))
		}
		return strings.Join(lines, "\n"), true
	case "events":
		ev := s.n.Events(s.pod(c).UID)
		if len(ev) == 0 {
			return "no events", true
		}
		return strings.Join(ev, "\n"), true
	}
	return "", false
}

// setResources applies the res= and restart-on= arguments: res=(c:CPU:MEM)
// makes c request and be limited to CPU and MEM; restart-on=(c:memory)
// gives c a resizePolicy restarting it when that resource is resized.
func setResources(t *testing.T, c *scenario.Command, spec *v1.PodSpec) {
	find := func(name string) *v1.Container {
		for i := range spec.Containers {
			if spec.Containers[i].Name == name {
				return &spec.Containers[i]
			}
		}
		t.Fatalf("%s: no container %q", c.Pos, name)
		return nil
	}
	for _, v := range c.Vals("res") {
		parts := strings.Split(v, ":")
		if len(parts) != 3 {
			t.Fatalf("%s: res=%q: want NAME:CPU:MEMORY", c.Pos, v)
		}
		cpu, err1 := resource.ParseQuantity(parts[1])
		mem, err2 := resource.ParseQuantity(parts[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: res=%q: %v %v", c.Pos, v, err1, err2)
		}
		l := v1.ResourceList{v1.ResourceCPU: cpu, v1.ResourceMemory: mem}
		find(parts[0]).Resources = v1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
	}
	for _, v := range c.Vals("restart-on") {
		name, res, ok := strings.Cut(v, ":")
		if !ok {
			t.Fatalf("%s: restart-on=%q: want NAME:RESOURCE", c.Pos, v)
		}
		ct := find(name)
		ct.ResizePolicy = append(ct.ResizePolicy, v1.ContainerResizePolicy{ResourceName: v1.ResourceName(res), RestartPolicy: v1.RestartContainer})
	}
}

// resizeStatus prints the pod's observedGeneration, its resize conditions
// (type, status, reason, observedGeneration, message) and each container's
// allocatedResources, resources, state and restarts.
func (s *scenarioNode) resizeStatus(p *v1.Pod) string {
	st, ok := s.n.Status(p.UID)
	if !ok {
		return "no status"
	}
	lines := []string{fmt.Sprintf("phase=%s observedGeneration=%d", st.Phase, st.ObservedGeneration)}
	for _, cond := range st.Conditions {
		if cond.Type != v1.PodResizePending && cond.Type != v1.PodResizeInProgress {
			continue
		}
		line := fmt.Sprintf("%s=%s reason=%s observedGeneration=%d", cond.Type, cond.Status, cond.Reason, cond.ObservedGeneration)
		if cond.Message != "" {
			line += ": " + cond.Message
		}
		lines = append(lines, line)
	}
	for _, cs := range st.ContainerStatuses {
		line := fmt.Sprintf("%s: %s restarts=%d allocated %s", cs.Name, stateString(cs.State), cs.RestartCount,
			resources(v1.ResourceRequirements{Requests: cs.AllocatedResources}))
		if cs.Resources != nil {
			line += " resources " + resources(*cs.Resources)
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// resources prints requests and limits of cpu and memory.
func resources(r v1.ResourceRequirements) string {
	list := func(l v1.ResourceList) string {
		if l == nil {
			return "-"
		}
		cpu, mem := l[v1.ResourceCPU], l[v1.ResourceMemory]
		return fmt.Sprintf("cpu=%s,memory=%s", cpu.String(), mem.String())
	}
	out := "requests(" + list(r.Requests) + ")"
	if r.Limits != nil {
		out += " limits(" + list(r.Limits) + ")"
	}
	return out
}
