package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/cpumanager"
	"github.com/nodekit/nodekit/memorymanager"
	"github.com/nodekit/nodekit/topology"
)

// resources are the CPU and memory managers and the topology manager
// that aligns them: the topology manager admits pods (and has the others
// allocate), the container options carry the resulting cpusets.
type resources struct {
	cpus     *cpumanager.Manager
	mem      *memorymanager.Manager
	topology *topology.Manager
}

// newResources builds the managers from cpuManagerPolicy,
// memoryManagerPolicy and topologyManagerPolicy (all off by default, as
// upstream). pods lists the loop's active pods and ready says whether the
// loop has handled every source's pods; both are called only once the
// agent runs.
func (a *agent) newResources(ctx context.Context, pods func() []*v1.Pod, ready func() bool, status cpumanager.PodStatusGetter) (*resources, error) {
	cfg := a.cfg
	machine, err := topology.Discover(ctx, topology.HostSysfs())
	if err != nil {
		return nil, fmt.Errorf("machine topology: %w", err)
	}
	var reservedList cpuset.CPUSet
	if cfg.ReservedSystemCPUs != "" {
		if reservedList, err = cpuset.Parse(cfg.ReservedSystemCPUs); err != nil {
			return nil, fmt.Errorf("reservedSystemCPUs: %q: %w", cfg.ReservedSystemCPUs, err)
		}
	}
	res := reserved(cfg)
	r := &resources{}
	r.cpus, err = cpumanager.New(ctx, cpumanager.Config{
		Policy: cfg.CPUManagerPolicy, Options: cfg.CPUManagerPolicyOptions, Topology: machine.CPU,
		ReservedSystemCPUs: reservedList, ReservedCPU: res[v1.ResourceCPU],
		StateDir: a.rootDir, ActivePods: cpumanager.PodListerFunc(pods), SourcesReady: ready,
		Status: status, Runtime: a.runtime, ReconcilePeriod: cfg.CPUManagerReconcilePeriod.Duration,
	})
	if err != nil {
		return nil, fmt.Errorf("cpuManagerPolicy: %w", err)
	}
	mcfg := memorymanager.Config{
		Policy: cfg.MemoryManagerPolicy, Machine: machine, ReservedMemory: cfg.ReservedMemory,
		StateDir: a.rootDir, ActivePods: memorymanager.PodListerFunc(pods), SourcesReady: ready,
	}
	if cfg.MemoryManagerPolicy == memorymanager.PolicyStatic {
		mcfg.NodeReservation = memoryReservation(cfg.EvictionHard, res)
	}
	if r.mem, err = memorymanager.New(ctx, mcfg); err != nil {
		return nil, fmt.Errorf("memoryManagerPolicy: %w", err)
	}
	r.topology, err = topology.NewManager(topology.Config{
		Policy: cfg.TopologyManagerPolicy, Scope: cfg.TopologyManagerScope, Options: cfg.TopologyManagerPolicyOptions, Machine: machine,
	}, r.cpus, r.mem)
	if err != nil {
		return nil, fmt.Errorf("topologyManagerPolicy: %w", err)
	}
	return r, nil
}

// memoryReservation is what reservedMemory must add up to, as upstream:
// system-reserved + kube-reserved + the hard memory.available threshold.
func memoryReservation(evictionHard map[string]string, res map[v1.ResourceName]resource.Quantity) v1.ResourceList {
	out := v1.ResourceList{}
	for name, q := range res {
		if name == v1.ResourceMemory || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			out[name] = q.DeepCopy()
		}
	}
	hard := evictionHard
	if hard == nil {
		hard = defaultEvictionHard
	}
	if v, ok := hard["memory.available"]; ok {
		if q, err := resource.ParseQuantity(v); err == nil { // a percentage is not added, as upstream
			m := out[v1.ResourceMemory]
			m.Add(q)
			out[v1.ResourceMemory] = m
		}
	}
	return out
}

// options adds the container's cpuset and NUMA memory nodes to the
// options next resolves.
func (r *resources) options(next nodekit.ContainerOptionsFunc) nodekit.ContainerOptionsFunc {
	return func(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*nodekit.ContainerOptions, error) {
		o, err := next(ctx, pod, c, podIPs)
		if err != nil || o == nil {
			return o, err
		}
		if set, ok := r.cpus.CPUSet(pod.UID, c.Name); ok {
			o.CPUSet = set
		}
		if mems, ok := r.mem.CPUSetMems(pod.UID, c.Name); ok {
			o.CPUSetMems = mems
		}
		return o, nil
	}
}

// run reconciles cpusets of running containers and releases the memory
// of pods that are gone.
func (r *resources) run(start func(string, func(context.Context) error)) {
	start("cpu manager", r.cpus.Run)
	start("memory manager", func(ctx context.Context) error {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				r.mem.Release(ctx)
			}
		}
	})
	klog.Background().V(2).Info("Resource managers running", "cpuManagerPolicy", r.cpus.Policy(), "memoryManagerPolicy", r.mem.Policy(), "topologyManagerPolicy", r.topology.Policy())
}
