package main

import (
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodekit/nodekit/cpumanager"
	"github.com/nodekit/nodekit/devicemgr"
	"github.com/nodekit/nodekit/memorymanager"
	"github.com/nodekit/nodekit/podresources"
)

// newPodResources builds the podresources API on
// ROOT/pod-resources/kubelet.sock over the loop's active pods and the
// CPU, memory and device managers, and the DRA manager's prepared claims
// when the agent prepares claims (dra.go).
func (a *agent) newPodResources() (*podresources.Server, error) {
	cfg := podresources.Config{
		Dir:     filepath.Join(a.rootDir, "pod-resources"),
		Pods:    a.pods, // the loop's active pods
		AllPods: a.pods, // v1alpha1's List, as upstream's pod manager
		CPUs:    podCPUs{a.resources.cpus},
		Memory:  podMemory{a.resources.mem},
		Devices: podDevices{a.devices},
	}
	if a.dra != nil { // a nil *dra.Manager in the interface would be called
		cfg.DynamicResources = a.dra
	}
	return podresources.New(cfg)
}

// podCPUs reports the CPU manager's exclusive CPUs.
type podCPUs struct{ m *cpumanager.Manager }

func (c podCPUs) ContainerCPUs(uid types.UID, name string) []int64 {
	return podresources.CPUIDs(c.m.ExclusiveCPUs(uid, name))
}

func (c podCPUs) AllocatableCPUs() []int64 { return podresources.CPUIDs(c.m.AllocatableCPUs()) }

// podMemory reports the static memory manager's blocks.
type podMemory struct{ m *memorymanager.Manager }

func (p podMemory) ContainerMemory(uid types.UID, name string) []*podresourcesv1.ContainerMemory {
	return memoryBlocks(p.m.MemoryBlocks(uid, name))
}

func (p podMemory) AllocatableMemory() []*podresourcesv1.ContainerMemory {
	return memoryBlocks(p.m.AllocatableMemory())
}

func memoryBlocks(blocks []memorymanager.Block) []*podresourcesv1.ContainerMemory {
	var out []*podresourcesv1.ContainerMemory
	for _, b := range blocks {
		out = append(out, podresources.Memory(string(b.Type), b.Size, b.NUMAAffinity))
	}
	return out
}

// podDevices reports the device plugins' devices.
type podDevices struct{ m *devicemgr.Manager }

func (d podDevices) ContainerDevices(uid types.UID, name string) []*podresourcesv1.ContainerDevices {
	return podresources.Devices(d.m.ContainerDevices(uid, name))
}

func (d podDevices) AllocatableDevices() []*podresourcesv1.ContainerDevices {
	return podresources.Devices(d.m.AllocatableDevices())
}
