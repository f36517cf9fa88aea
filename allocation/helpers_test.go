package allocation_test

import (
	"context"
	"fmt"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/allocation"
)

// list parses "cpu=100m,memory=64Mi".
func list(s string) v1.ResourceList {
	if s == "" {
		return nil
	}
	out := v1.ResourceList{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out[v1.ResourceName(k)] = resource.MustParse(v)
	}
	return out
}

func reqs(requests, limits string) v1.ResourceRequirements {
	return v1.ResourceRequirements{Requests: list(requests), Limits: list(limits)}
}

// podLevel is pod-level resources (spec.resources).
func podLevel(requests, limits string) *v1.ResourceRequirements {
	r := reqs(requests, limits)
	return &r
}

// ctr is a container with resources and resize policies ("memory" or
// "cpu" restart the container).
func ctr(name string, r v1.ResourceRequirements, restartOn ...v1.ResourceName) v1.Container {
	c := v1.Container{Name: name, Image: "busybox", Resources: r}
	for _, n := range restartOn {
		c.ResizePolicy = append(c.ResizePolicy, v1.ContainerResizePolicy{ResourceName: n, RestartPolicy: v1.RestartContainer})
	}
	return c
}

func podOf(uid string, cs ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid), Generation: 1},
		Spec:       v1.PodSpec{Containers: cs},
	}
}

// runningPod marks pod Running as the API server has it (what SetStatus
// reads back the pod cgroup for, as upstream).
func runningPod(pod *v1.Pod) *v1.Pod {
	pod.Status.Phase = v1.PodRunning
	return pod
}

// fitOn is package admission's resource fit on a node with allocatable.
func fitOn(allocatable string) nodekit.Admitter {
	node := &v1.Node{Status: v1.NodeStatus{Allocatable: list(allocatable + ",pods=110")}}
	return admission.NewResourceFit(admission.NodeFunc(func(context.Context) (*v1.Node, error) { return node, nil }))
}

func running(pod *v1.Pod, names ...string) *nodekit.PodStatus {
	rs := &nodekit.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
	for _, n := range names {
		rs.Containers = append(rs.Containers, &nodekit.ContainerStatus{
			ID: nodekit.ContainerID{Type: "fake", ID: "id-" + n}, Name: n, State: nodekit.StateRunning,
		})
	}
	return rs
}

// recorder records the actuator's calls in order.
type recorder struct {
	mu       sync.Mutex
	calls    []string
	usage    map[string]uint64
	podUsage uint64
	failOn   string
	// sandboxErr fails UpdatePodSandboxResources, podErr EnsurePod.
	sandboxErr, podErr error
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *recorder) ResizeContainer(_ context.Context, id nodekit.ContainerID, res v1.ResourceRequirements) error {
	if id.ID == r.failOn {
		return fmt.Errorf("runtime refused")
	}
	r.add(fmt.Sprintf("%s cpu=%s/%s mem=%s/%s", id.ID, res.Requests.Cpu(), res.Limits.Cpu(), res.Requests.Memory(), res.Limits.Memory()))
	return nil
}

func (r *recorder) EnsurePod(_ context.Context, pod *v1.Pod) (string, error) {
	var cpu, mem resource.Quantity
	for _, c := range pod.Spec.Containers {
		cpu.Add(*c.Resources.Limits.Cpu())
		mem.Add(*c.Resources.Limits.Memory())
	}
	if pl := pod.Spec.Resources; pl != nil {
		if q, ok := pl.Limits[v1.ResourceCPU]; ok {
			cpu = q
		}
		if q, ok := pl.Limits[v1.ResourceMemory]; ok {
			mem = q
		}
	}
	r.add(fmt.Sprintf("pod cpu=%s mem=%s", cpu.String(), mem.String()))
	if r.podErr != nil {
		return "", r.podErr
	}
	return "/kubepods/pod" + string(pod.UID), nil
}

func (r *recorder) UpdatePodSandboxResources(_ context.Context, id string, res v1.ResourceRequirements, _ v1.ResourceList) error {
	r.add(fmt.Sprintf("sandbox %s cpu=%s/%s mem=%s/%s", id, res.Requests.Cpu(), res.Limits.Cpu(), res.Requests.Memory(), res.Limits.Memory()))
	return r.sandboxErr
}

func (r *recorder) ContainerMemoryUsage(_ context.Context, id nodekit.ContainerID) (uint64, error) {
	u, ok := r.usage[id.ID]
	if !ok {
		return 0, fmt.Errorf("no stats for %s", id.ID)
	}
	return u, nil
}

func (r *recorder) PodMemoryUsage(context.Context, *v1.Pod) (uint64, error) {
	if r.podUsage == 0 {
		return 0, fmt.Errorf("no pod stats")
	}
	return r.podUsage, nil
}

var (
	_ allocation.PodMemoryUsage   = (*recorder)(nil)
	_ allocation.ContainerUpdater = (*recorder)(nil)
	_ allocation.PodCgroup        = (*recorder)(nil)
	_ allocation.MemoryUsage      = (*recorder)(nil)
	_ allocation.SandboxUpdater   = (*recorder)(nil)
)
