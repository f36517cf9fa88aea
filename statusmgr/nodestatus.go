package statusmgr

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	goruntime "runtime"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/smpatch"
)

// setStatus computes node's status in place from the machine, the
// configuration, the setters and the condition providers. Fields it does not
// own (extended resources, conditions of other types, volumes, images) are
// kept. A machine-info failure keeps the previous capacity and is returned
// after everything else was set.
func (r *NodeReporter) setStatus(ctx context.Context, node *v1.Node) error {
	logger := klog.FromContext(ctx)
	var errs []error
	now := metav1.NewTime(r.cfg.Clock.Now())

	m, err := r.cfg.Machine.Machine(ctx)
	if err != nil {
		errs = append(errs, err)
	} else {
		setCapacity(node, m, r.cfg.MaxPods)
		info := &node.Status.NodeInfo
		info.MachineID, info.SystemUUID, info.BootID = m.MachineID, m.SystemUUID, m.BootID
		info.KernelVersion, info.OSImage = m.KernelVersion, m.OSImage
	}
	setAllocatable(node, r.cfg.Reserved)

	info := &node.Status.NodeInfo
	info.OperatingSystem = goruntime.GOOS
	info.Architecture = goruntime.GOARCH
	info.KubeletVersion = r.cfg.KubeletVersion
	info.KubeProxyVersion = "" //nolint:staticcheck // deprecated: kept empty, as kubelet v1.37 does
	if r.cfg.Runtime != nil {
		if v, err := r.cfg.Runtime.Version(ctx); err != nil {
			logger.V(2).Info("Container runtime version unknown; keeping the last one", "err", err)
		} else {
			info.ContainerRuntimeVersion = v
		}
	}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = r.cfg.KubeletPort
	if r.cfg.DeclaredFeatures != nil {
		node.Status.DeclaredFeatures = slices.Clone(r.cfg.DeclaredFeatures)
	}

	addrs, err := r.addresses()
	if err != nil {
		errs = append(errs, err)
	} else {
		node.Status.Addresses = addrs
	}

	for _, s := range r.cfg.Setters {
		if err := s.SetNodeStatus(ctx, node); err != nil {
			errs = append(errs, fmt.Errorf("node status setter: %w", err))
		}
	}

	for _, t := range conditionOrder(r.cfg.Conditions) {
		st := r.cfg.Conditions[t].NodeCondition(ctx)
		if t == v1.NodeReady {
			if missing := missingCapacity(node); len(missing) > 0 {
				st = ConditionState{Status: v1.ConditionFalse, Reason: reasonKubeletNotReady,
					Message: "missing node capacity for resources: " + strings.Join(missing, ", ")}
			}
		}
		setNodeCondition(node, t, st, now)
	}
	return errors.Join(errs...)
}

// setCapacity writes the machine's resources into capacity; other entries
// (extended resources) are kept, huge page sizes the machine lacks removed.
func setCapacity(node *v1.Node, m Machine, maxPods int) {
	c := node.Status.Capacity
	if c == nil {
		c = v1.ResourceList{}
		node.Status.Capacity = c
	}
	c[v1.ResourceCPU] = *resource.NewQuantity(int64(m.NumCores), resource.DecimalSI)
	c[v1.ResourceMemory] = *resource.NewQuantity(int64(m.MemoryBytes), resource.BinarySI)
	c[v1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(m.EphemeralStorageBytes), resource.BinarySI)
	c[v1.ResourcePods] = *resource.NewQuantity(int64(maxPods), resource.DecimalSI)
	for name := range c {
		if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			delete(c, name)
		}
	}
	for size, pages := range m.HugePages {
		c[hugePageResource(size)] = *resource.NewQuantity(int64(size*pages), resource.BinarySI)
	}
}

// hugePageResource names the resource of a page size: hugepages-2Mi,
// hugepages-1Gi.
func hugePageResource(size uint64) v1.ResourceName {
	q := resource.NewQuantity(int64(size), resource.BinarySI)
	return v1.ResourceName(v1.ResourceHugePagesPrefix + q.String())
}

// setAllocatable derives allocatable from capacity: minus the reservation,
// minus huge pages for memory, never negative. Allocatable entries whose
// resource left capacity are dropped.
func setAllocatable(node *v1.Node, reserved v1.ResourceList) {
	alloc := v1.ResourceList{}
	var huge resource.Quantity
	for name, q := range node.Status.Capacity {
		v := q.DeepCopy()
		if r, ok := reserved[name]; ok {
			v.Sub(r)
		}
		if v.Sign() < 0 {
			v.Set(0)
		}
		alloc[name] = v
		if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			huge.Add(q)
		}
	}
	if mem, ok := alloc[v1.ResourceMemory]; ok && !huge.IsZero() {
		mem.Sub(huge)
		if mem.Sign() < 0 {
			mem.Set(0)
		}
		alloc[v1.ResourceMemory] = mem
	}
	node.Status.Allocatable = alloc
}

func missingCapacity(node *v1.Node) []string {
	var missing []string
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods, v1.ResourceEphemeralStorage} {
		if _, ok := node.Status.Capacity[name]; !ok {
			missing = append(missing, string(name))
		}
	}
	return missing
}

// addresses are the InternalIP (configured, else picked from the host) and
// the Hostname.
func (r *NodeReporter) addresses() ([]v1.NodeAddress, error) {
	ip := r.nodeIP
	if ip == nil {
		var err error
		if ip, err = hostIP(); err != nil {
			return []v1.NodeAddress{{Type: v1.NodeHostName, Address: r.cfg.Hostname}}, err
		}
	}
	return []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: ip.String()},
		{Type: v1.NodeHostName, Address: r.cfg.Hostname},
	}, nil
}

// hostIP is the first global unicast address of the host's interfaces,
// IPv4 before IPv6.
func hostIP() (net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("node IP: %w", err)
	}
	var v6 net.IP
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || !n.IP.IsGlobalUnicast() {
			continue
		}
		if n.IP.To4() != nil {
			return n.IP, nil
		}
		if v6 == nil {
			v6 = n.IP
		}
	}
	if v6 != nil {
		return v6, nil
	}
	return nil, errors.New("node IP: no global unicast address on any interface; set NodeConfig.NodeIP")
}

// nodeStatusChanged reports a difference between two statuses other than
// the conditions' heartbeat times.
func nodeStatusChanged(old, cur *v1.NodeStatus) bool {
	if len(old.Conditions) != len(cur.Conditions) {
		return true
	}
	strip := func(cs []v1.NodeCondition) []v1.NodeCondition {
		out := slices.Clone(cs)
		for i := range out {
			out[i].LastHeartbeatTime = metav1.Time{}
		}
		slices.SortStableFunc(out, func(a, b v1.NodeCondition) int { return cmp.Compare(a.Type, b.Type) })
		return out
	}
	if !equality.Semantic.DeepEqual(strip(old.Conditions), strip(cur.Conditions)) {
		return true
	}
	a, b := *old, *cur
	a.Conditions, b.Conditions = nil, nil
	return !equality.Semantic.DeepEqual(&a, &b)
}

// patch sends the difference between old and cur (metadata and status; the
// spec is not the agent's to change) to the Node's status subresource.
func (r *NodeReporter) patch(ctx context.Context, old, cur *v1.Node) error {
	patch, err := nodeStatusPatch(old, cur)
	if err != nil {
		return err
	}
	_, err = r.client.CoreV1().Nodes().Patch(ctx, r.cfg.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Patched node status", "node", r.cfg.NodeName, "patch", string(patch))
	return nil
}

// nodeStatusPatch is the strategic merge patch from old to cur. Addresses
// are declared mergeable by type in the API, which mangles a changed list,
// so when they change the patch replaces the whole list instead.
func nodeStatusPatch(old, cur *v1.Node) ([]byte, error) {
	before, err := json.Marshal(old)
	if err != nil {
		return nil, fmt.Errorf("encode node: %w", err)
	}
	diff := cur.DeepCopy()
	diff.Spec = old.Spec
	replaceAddrs := len(old.Status.Addresses) > 0 && !equality.Semantic.DeepEqual(old.Status.Addresses, cur.Status.Addresses)
	if replaceAddrs {
		diff.Status.Addresses = old.Status.Addresses
	}
	after, err := json.Marshal(diff)
	if err != nil {
		return nil, fmt.Errorf("encode node: %w", err)
	}
	patch, err := smpatch.TwoWay(before, after, v1.Node{})
	if err != nil {
		return nil, fmt.Errorf("compute node patch: %w", err)
	}
	if !replaceAddrs {
		return patch, nil
	}
	var doc map[string]any
	if err := json.Unmarshal(patch, &doc); err != nil {
		return nil, fmt.Errorf("decode node patch: %w", err)
	}
	status, _ := doc["status"].(map[string]any)
	if status == nil {
		status = map[string]any{}
		doc["status"] = status
	}
	list := make([]any, 0, len(cur.Status.Addresses)+1)
	for _, a := range cur.Status.Addresses {
		list = append(list, map[string]any{"type": string(a.Type), "address": a.Address})
	}
	status["addresses"] = append(list, map[string]any{"$patch": "replace"})
	return json.Marshal(doc)
}
