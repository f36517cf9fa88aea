package cgroupmgr

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/qos"
)

// UpdateQOS sizes the QoS tiers to the active pods, as upstream's
// periodic UpdateCgroups: besteffort gets cpu.shares 2; burstable the
// shares of the summed CPU requests of the Burstable pods; all three
// tiers (kubepods is the Guaranteed one) unbounded huge pages; and with
// QOSReserved[memory] = p, burstable's memory limit is allocatable minus
// p% of the Guaranteed pods' memory requests and besteffort's that minus
// p% of the Burstable pods' (allocatable being capacity - reserved). When
// a limit cannot be set because usage is already above it (cgroup v1:
// the kernel refuses the write), the limit is set to the usage instead,
// to stop further growth; cgroup v2 takes such a write, reclaims, and
// OOM-kills in the tier what it cannot reclaim, as under upstream's
// kubelet (tested on a v2 guest by internal/localvm). It also retries node
// allocatable limits Start could not set. Call it after Start and from
// housekeeping; without CgroupsPerQOS it does nothing. It writes every
// tier each time, so a value changed behind the manager's back is set
// again.
func (m *Manager) UpdateQOS(ctx context.Context, activePods []*v1.Pod) error {
	return m.updateQOS(ctx, activePods, true)
}

// EnsureQOS is UpdateQOS for a pod's start, where upstream sizes the
// tiers before a new pod's cgroup is made: it writes nothing when the
// sizes it would write are those the last UpdateQOS or EnsureQOS wrote in
// full (no limit lowered to the usage, no node allocatable limit left to
// retry), and writes as UpdateQOS otherwise. The periodic UpdateQOS is
// what repairs a value changed by someone else.
func (m *Manager) EnsureQOS(ctx context.Context, activePods []*v1.Pod) error {
	return m.updateQOS(ctx, activePods, false)
}

// qosSizes is what the tiers' sizes are computed from: the Burstable
// pods' CPU requests and the memory requests by QoS class.
type qosSizes struct {
	burstableMilliCPU           int64
	guaranteedMem, burstableMem int64
}

func sizesOf(activePods []*v1.Pod) qosSizes {
	var s qosSizes
	for _, pod := range activePods {
		if pod == nil {
			continue
		}
		class := qos.Class(pod)
		if class == v1.PodQOSBestEffort {
			continue
		}
		reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
		if q, ok := reqs[v1.ResourceCPU]; ok && class == v1.PodQOSBurstable {
			s.burstableMilliCPU += q.MilliValue()
		}
		if q, ok := reqs[v1.ResourceMemory]; ok {
			if class == v1.PodQOSBurstable {
				s.burstableMem += q.Value()
			} else {
				s.guaranteedMem += q.Value()
			}
		}
	}
	return s
}

func (m *Manager) updateQOS(ctx context.Context, activePods []*v1.Pod, force bool) error {
	if !m.cfg.CgroupsPerQOS {
		return nil
	}
	d, err := m.started()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	logger := klog.FromContext(ctx)
	sizes := sizesOf(activePods)
	if !force && m.pendingRoot == nil && m.written != nil && *m.written == sizes {
		logger.V(5).Info("QoS cgroups already sized to the active pods")
		return nil
	}
	m.written = nil

	if m.pendingRoot != nil {
		if err := d.Apply(ctx, m.kubepods, m.pendingRoot); err != nil {
			logger.Error(err, "Failed to update node allocatable limits", "cgroup", m.literal(m.kubepods))
		} else {
			logger.Info("Updated node allocatable limits", "cgroup", m.literal(m.kubepods))
			m.pendingRoot = nil
		}
	}

	unbounded := unboundedHugePages
	tier := func(name CgroupName) qosTier {
		return qosTier{name, &ResourceConfig{HugePageLimit: map[int64]int64{}, HugePageOthers: &unbounded}}
	}
	guaranteed, burstable, bestEffort := tier(m.kubepods), tier(m.burstable), tier(m.bestEffort)
	burstable.rc.CPUShares = ptr(MilliCPUToShares(sizes.burstableMilliCPU))
	bestEffort.rc.CPUShares = ptr(uint64(MinShares))
	tiers := []qosTier{guaranteed, burstable, bestEffort}

	pct, reserveMemory := m.cfg.QOSReserved[v1.ResourceMemory]
	if reserveMemory {
		m.setMemoryReserve(ctx, burstable.rc, bestEffort.rc, sizes, pct)
		if m.applyAll(ctx, d, tiers) == nil {
			m.wrote(sizes)
			return nil
		}
		// Usage above the wanted limit fails the write: aim at the usage.
		if mu, ok := d.(memoryUser); ok {
			for _, t := range tiers {
				usage, err := mu.MemoryUsage(ctx, t.name)
				if err != nil {
					logger.V(2).Info("Failed to read QoS cgroup memory usage", "cgroup", m.literal(t.name), "err", err)
					break
				}
				if t.rc.Memory != nil && usage > *t.rc.Memory {
					t.rc.Memory = ptr(usage)
				}
			}
		}
	}
	if err := m.applyAll(ctx, d, tiers); err != nil {
		return fmt.Errorf("cgroupmgr: update QoS cgroups: %w", err)
	}
	if !reserveMemory {
		m.wrote(sizes)
	}
	logger.V(4).Info("Updated QoS cgroups", "burstableCPUShares", *burstable.rc.CPUShares)
	return nil
}

// wrote records the sizes of a write of every tier at its wanted values,
// unless a node allocatable limit is still to be retried.
func (m *Manager) wrote(s qosSizes) {
	if m.pendingRoot == nil {
		m.written = &s
	}
}

type qosTier struct {
	name CgroupName
	rc   *ResourceConfig
}

// applyAll applies every tier, attempting all of them even after a
// failure.
func (m *Manager) applyAll(ctx context.Context, d Driver, tiers []qosTier) error {
	var errs []error
	for _, t := range tiers {
		start := m.cfg.Clock.Now()
		if err := d.Apply(ctx, t.name, t.rc); err != nil {
			errs = append(errs, err)
			continue
		}
		m.observe("update", start)
	}
	return errors.Join(errs...)
}

// setMemoryReserve computes the QoS memory limits, as upstream's
// setMemoryReserve; without an allocatable memory it sets none.
func (m *Manager) setMemoryReserve(ctx context.Context, burstable, bestEffort *ResourceConfig, sizes qosSizes, pct int64) {
	a, _ := NodeAllocatable(m.cfg.Capacity, m.cfg.KubeReserved, m.cfg.SystemReserved, nil)
	q, ok := a.Kubepods[v1.ResourceMemory]
	if !ok || q.Value() == 0 {
		klog.FromContext(ctx).V(2).Info("Allocatable memory unknown, not setting QoS memory limits")
		return
	}
	burstableLimit := q.Value() - sizes.guaranteedMem*pct/100
	bestEffortLimit := burstableLimit - sizes.burstableMem*pct/100
	burstable.Memory = &burstableLimit
	bestEffort.Memory = &bestEffortLimit
}
