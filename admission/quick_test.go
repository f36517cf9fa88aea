package admission_test

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
)

// load is a pod's demand in the two dimensions the property test uses.
type load struct{ milliCPU, memory int64 }

func (l load) add(o load) load { return load{l.milliCPU + o.milliCPU, l.memory + o.memory} }
func (l load) max(o load) load { return load{max(l.milliCPU, o.milliCPU), max(l.memory, o.memory)} }

// fitScenario is a node and a stream of pods arriving one by one.
type fitScenario struct {
	alloc   load
	maxPods int64
	pods    []*v1.Pod
}

// Generate implements quick.Generator: random regular containers, init
// containers and sidecars in random order, optional overhead, some terminal
// pods, some with zero requests.
func (fitScenario) Generate(r *rand.Rand, size int) reflect.Value {
	s := fitScenario{
		alloc:   load{int64(500 + r.Intn(8000)), int64(256+r.Intn(8192)) << 20},
		maxPods: int64(1 + r.Intn(40)),
	}
	quantities := func() v1.ResourceList {
		rl := v1.ResourceList{}
		if r.Intn(5) > 0 {
			rl[v1.ResourceCPU] = *resource.NewMilliQuantity(int64(r.Intn(1500)), resource.DecimalSI)
		}
		if r.Intn(5) > 0 {
			rl[v1.ResourceMemory] = *resource.NewQuantity(int64(r.Intn(1500))<<20, resource.BinarySI)
		}
		return rl
	}
	always := v1.ContainerRestartPolicyAlways
	n := 1 + r.Intn(20+size)
	for i := range n {
		p := pod(fmt.Sprintf("p%d", i), "")
		p.Spec.Containers = nil
		for j := range 1 + r.Intn(3) {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", j), Resources: v1.ResourceRequirements{Requests: quantities()}})
		}
		for j := range r.Intn(4) {
			c := v1.Container{Name: fmt.Sprintf("i%d", j), Resources: v1.ResourceRequirements{Requests: quantities()}}
			if r.Intn(2) == 0 {
				c.RestartPolicy = &always
			}
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		}
		if r.Intn(4) == 0 {
			p.Spec.Overhead = quantities()
		}
		if r.Intn(8) == 0 {
			p.Status.Phase = v1.PodSucceeded
		}
		s.pods = append(s.pods, p)
	}
	return reflect.ValueOf(s)
}

// GoString keeps quick's failure report readable.
func (s fitScenario) GoString() string {
	return fmt.Sprintf("fitScenario{alloc: %+v, maxPods: %d, %d pods}", s.alloc, s.maxPods, len(s.pods))
}

// naiveLoad walks the pod's life: each init container in turn beside the
// sidecars already started, then the regular containers beside all sidecars.
// Its peak, plus overhead, is what the pod needs.
func naiveLoad(p *v1.Pod) load {
	of := func(rl v1.ResourceList) load {
		return load{rl.Cpu().MilliValue(), rl.Memory().Value()}
	}
	var sidecars, peak load
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sidecars = sidecars.add(of(c.Resources.Requests))
			peak = peak.max(sidecars)
			continue
		}
		peak = peak.max(sidecars.add(of(c.Resources.Requests)))
	}
	steady := sidecars
	for _, c := range p.Spec.Containers {
		steady = steady.add(of(c.Resources.Requests))
	}
	return peak.max(steady).add(of(p.Spec.Overhead))
}

// TestResourceFitNeverOvercommits admits each scenario's pods in turn and
// checks that what ResourceFit admitted never exceeds allocatable, and that
// every decision is the one the naive model makes.
func TestResourceFitNeverOvercommits(t *testing.T) {
	ctx := context.Background()
	prop := func(s fitScenario) bool {
		node := &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU:    *resource.NewMilliQuantity(s.alloc.milliCPU, resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(s.alloc.memory, resource.BinarySI),
			v1.ResourcePods:   *resource.NewQuantity(s.maxPods, resource.DecimalSI),
		}}}
		fit := admission.NewResourceFit(admission.NodeFunc(func(context.Context) (*v1.Node, error) { return node, nil }))
		var admitted []*v1.Pod
		var used load
		var active int64
		for _, p := range s.pods {
			d := fit.Admit(ctx, nodekit.AdmitRequest{Pod: p, Pods: admitted})
			need := naiveLoad(p)
			fits := active+1 <= s.maxPods &&
				(need.milliCPU == 0 || used.milliCPU+need.milliCPU <= s.alloc.milliCPU) &&
				(need.memory == 0 || used.memory+need.memory <= s.alloc.memory)
			if d.Admit != fits {
				t.Logf("pod %s needs %+v, used %+v of %+v, %d/%d pods: got %+v", p.Name, need, used, s.alloc, active, s.maxPods, d)
				return false
			}
			if !d.Admit {
				continue
			}
			admitted = append(admitted, p)
			if p.Status.Phase == v1.PodSucceeded {
				continue // admitted, then finished: holds nothing
			}
			active++
			used = used.add(need)
			if used.milliCPU > s.alloc.milliCPU || used.memory > s.alloc.memory || active > s.maxPods {
				t.Logf("overcommitted: used %+v of %+v, %d/%d pods", used, s.alloc, active, s.maxPods)
				return false
			}
		}
		return true
	}
	cfg := &quick.Config{MaxCount: 500, Rand: rand.New(rand.NewSource(37))}
	if err := quick.Check(prop, cfg); err != nil {
		t.Error(err)
	}
}
