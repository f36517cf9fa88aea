package cgroupmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// applyV1 creates name in every hierarchy, then writes rc to the
// hierarchies holding each controller.
func (d *fsDriver) applyV1(_ context.Context, name CgroupName, rc *ResourceConfig) error {
	for _, h := range d.hierarchies {
		if err := mkdirV1(h, d.parts(name)); err != nil {
			return err
		}
	}
	for _, h := range d.hierarchies {
		dir := filepath.Join(h.dir, d.rel(name))
		if h.controllers["cpu"] {
			if err := writeCPUV1(dir, rc); err != nil {
				return err
			}
		}
		if h.controllers["memory"] && rc.Memory != nil && *rc.Memory != 0 {
			if err := writeFile(dir, "memory.limit_in_bytes", strconv.FormatInt(*rc.Memory, 10)); err != nil {
				return err
			}
		}
		if h.controllers["pids"] && rc.PidsLimit != nil {
			if err := writeFile(dir, "pids.max", pidsValue(*rc.PidsLimit)); err != nil {
				return err
			}
		}
		if h.controllers["hugetlb"] && rc.HugePageLimit != nil {
			writes, err := hugePageWrites(rc, hugePageSizesIn(dir, ".limit_in_bytes"))
			if err != nil {
				return err
			}
			for size, limit := range writes {
				if err := writeFile(dir, "hugetlb."+size+".limit_in_bytes", strconv.FormatInt(limit, 10)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// mkdirV1 creates the directories of a cgroup, given as its path
// components below the mount point, in h. In the cpuset hierarchy a new
// cgroup starts with no CPUs and no memory nodes and takes no process
// until given some: each level gets its parent's, so there every level is
// walked. Elsewhere the cgroup itself is made first and its ancestors only
// when it reports one missing: a pod's cgroup is made once per pod in
// each hierarchy, below ancestors that nearly always exist.
func mkdirV1(h hierarchy, parts []string) error {
	if h.controllers["cpuset"] {
		return mkdirV1Walk(h, parts)
	}
	return mkdirV1Leaf(h, parts)
}

func mkdirV1Leaf(h hierarchy, parts []string) error {
	if len(parts) == 0 {
		return nil
	}
	dir := filepath.Join(h.dir, filepath.Join(parts...))
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, os.ErrNotExist) {
		if err := mkdirV1Leaf(h, parts[:len(parts)-1]); err != nil {
			return err
		}
		err = os.Mkdir(dir, 0o755)
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cgroupmgr: create %s: %w", dir, err)
	}
	return nil
}

func mkdirV1Walk(h hierarchy, parts []string) error {
	parent := h.dir
	for i := range parts {
		dir := filepath.Join(parent, parts[i])
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroupmgr: create %s: %w", dir, err)
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			if err := inheritCpuset(parent, dir, file); err != nil {
				return err
			}
		}
		parent = dir
	}
	return nil
}

func inheritCpuset(parent, dir, file string) error {
	if cur, err := readTrimmed(dir, file); err == nil && cur != "" {
		return nil
	}
	val, err := readTrimmed(parent, file)
	if err != nil {
		return fmt.Errorf("cgroupmgr: copy %s from the parent of %s: %w", file, dir, err)
	}
	if val == "" {
		return fmt.Errorf("cgroupmgr: copy %s to %s: the parent's is empty", file, dir)
	}
	return writeFile(dir, file, val)
}

// writeCPUV1 writes shares and CFS bandwidth. The kernel checks quota and
// period together against the parent: a shorter period may be refused
// (EINVAL) until the quota shrinks too, so then the quota goes first, as
// runc does. A zero quota or period means unset.
func writeCPUV1(dir string, rc *ResourceConfig) error {
	if rc.CPUShares != nil {
		if err := writeFile(dir, "cpu.shares", strconv.FormatUint(*rc.CPUShares, 10)); err != nil {
			return err
		}
	}
	quota := int64(0)
	if rc.CPUQuota != nil {
		quota = *rc.CPUQuota
	}
	period := ""
	if rc.CPUPeriod != nil && *rc.CPUPeriod != 0 {
		period = strconv.FormatUint(*rc.CPUPeriod, 10)
		if err := writeFile(dir, "cpu.cfs_period_us", period); err != nil {
			if !errors.Is(err, unix.EINVAL) || quota == 0 {
				return err
			}
		} else {
			period = ""
		}
	}
	if quota != 0 {
		if err := writeFile(dir, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
			return err
		}
		if period != "" {
			return writeFile(dir, "cpu.cfs_period_us", period)
		}
	}
	return nil
}

func pidsValue(limit int64) string {
	if limit > 0 {
		return strconv.FormatInt(limit, 10)
	}
	return "max"
}
