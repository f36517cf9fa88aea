package cgroupmgr

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// configReader is the optional Driver capability ReadPodCgroup needs:
// reading back what a cgroup holds.
type configReader interface {
	ReadConfig(ctx context.Context, name CgroupName) (*ResourceConfig, error)
}

var (
	_ configReader = (*fsDriver)(nil)
	_ configReader = (*systemdDriver)(nil)
)

// ReadPodCgroup reads back the CPU and memory limits of pod's cgroup, as
// upstream's GetPodCgroupConfig: CPUShares (cpu.shares on v1; on v2
// cpu.weight converted back to shares by CPUWeightToShares, so lossy),
// CPUQuota and CPUPeriod (the quota -1 when unlimited) and Memory (-1 when
// unlimited on v2; on v1 an unlimited cgroup reads as the kernel's largest
// page-aligned value, 9223372036854771712 with 4 KiB pages, and is
// returned as read: upstream reports that value in the status of a pod
// without a memory limit, as kubelet v1.37.2 does on this host's cgroup
// v1). The CPU and memory parts are read separately: when one
// cannot be read its fields stay nil and the error says why, the other is
// still returned. The result is never nil and belongs to the caller. It
// reads files only (on the systemd driver too) and does not block
// otherwise. Without CgroupsPerQOS there is no pod cgroup and it fails.
func (m *Manager) ReadPodCgroup(ctx context.Context, pod *v1.Pod) (*ResourceConfig, error) {
	if !m.cfg.CgroupsPerQOS {
		return &ResourceConfig{}, errors.New("cgroupmgr: no pod cgroups (cgroupsPerQOS is off)")
	}
	name, err := m.PodCgroupName(pod)
	if err != nil {
		return &ResourceConfig{}, err
	}
	d, err := m.started()
	if err != nil {
		return &ResourceConfig{}, err
	}
	r, ok := d.(configReader)
	if !ok {
		return &ResourceConfig{}, errors.New("cgroupmgr: the cgroup driver cannot read a cgroup's limits")
	}
	rc, err := r.ReadConfig(ctx, name)
	if rc == nil {
		rc = &ResourceConfig{}
	}
	if err != nil {
		err = fmt.Errorf("cgroupmgr: pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return rc, err
}

// ReadConfig reads name's CPU and memory limits from its files.
func (d *systemdDriver) ReadConfig(ctx context.Context, name CgroupName) (*ResourceConfig, error) {
	return d.fs.ReadConfig(ctx, name)
}

// ReadConfig reads name's cpu shares (v2: weight as shares), CFS quota and
// period, and memory limit; see Manager.ReadPodCgroup.
func (d *fsDriver) ReadConfig(_ context.Context, name CgroupName) (*ResourceConfig, error) {
	rc := &ResourceConfig{}
	var cpuErr, memErr error
	if d.version == V2 {
		dir := filepath.Join(d.root, d.rel(name))
		cpuErr = readCPUV2(dir, rc)
		memErr = readMemory(dir, "memory.max", rc)
	} else {
		cpuErr = errors.New("no cgroup v1 cpu hierarchy")
		memErr = errors.New("no cgroup v1 memory hierarchy")
		for _, h := range d.hierarchies {
			dir := filepath.Join(h.dir, d.rel(name))
			if h.controllers["cpu"] {
				cpuErr = readCPUV1(dir, rc)
			}
			if h.controllers["memory"] {
				memErr = readMemory(dir, "memory.limit_in_bytes", rc)
			}
		}
	}
	if cpuErr != nil {
		cpuErr = fmt.Errorf("read the cpu limits of %s: %w", name, cpuErr)
	}
	if memErr != nil {
		memErr = fmt.Errorf("read the memory limit of %s: %w", name, memErr)
	}
	return rc, errors.Join(cpuErr, memErr)
}

// readCPUV1 sets rc's CPU fields from cpu.shares, cpu.cfs_quota_us and
// cpu.cfs_period_us, all or none.
func readCPUV1(dir string, rc *ResourceConfig) error {
	shares, err := readUint(dir, "cpu.shares")
	if err != nil {
		return err
	}
	quota, err := readInt(dir, "cpu.cfs_quota_us")
	if err != nil {
		return err
	}
	period, err := readUint(dir, "cpu.cfs_period_us")
	if err != nil {
		return err
	}
	if quota < 0 {
		quota = -1
	}
	rc.CPUShares, rc.CPUQuota, rc.CPUPeriod = &shares, &quota, &period
	return nil
}

// readCPUV2 sets rc's CPU fields from cpu.max ("$QUOTA $PERIOD", the
// quota "max" when unlimited) and cpu.weight, all or none.
func readCPUV2(dir string, rc *ResourceConfig) error {
	s, err := readTrimmed(dir, "cpu.max")
	if err != nil {
		return err
	}
	fields := strings.Fields(s)
	if len(fields) != 2 {
		return fmt.Errorf("cpu.max of %s: %q is not \"$QUOTA $PERIOD\"", dir, s)
	}
	quota := int64(-1)
	if fields[0] != "max" {
		if quota, err = strconv.ParseInt(fields[0], 10, 64); err != nil {
			return fmt.Errorf("cpu.max of %s: quota: %w", dir, err)
		}
	}
	period, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return fmt.Errorf("cpu.max of %s: period: %w", dir, err)
	}
	weight, err := readUint(dir, "cpu.weight")
	if err != nil {
		return err
	}
	shares := CPUWeightToShares(weight)
	rc.CPUShares, rc.CPUQuota, rc.CPUPeriod = &shares, &quota, &period
	return nil
}

// readMemory sets rc.Memory from file, -1 for v2's "max" (and a value
// past int64, as upstream's conversion reads it), the value as read
// otherwise: v1's unlimited is a large number, kept as upstream keeps it.
func readMemory(dir, file string, rc *ResourceConfig) error {
	s, err := readTrimmed(dir, file)
	if err != nil {
		return err
	}
	v := int64(-1)
	if s != "max" {
		u, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%s of %s: %w", file, dir, err)
		}
		v = int64(u) // as upstream: past int64 wraps to a negative, no limit
	}
	rc.Memory = &v
	return nil
}

func readUint(dir, file string) (uint64, error) {
	s, err := readTrimmed(dir, file)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s of %s: %w", file, dir, err)
	}
	return v, nil
}

func readInt(dir, file string) (int64, error) {
	s, err := readTrimmed(dir, file)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s of %s: %w", file, dir, err)
	}
	return v, nil
}
