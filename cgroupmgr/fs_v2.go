package cgroupmgr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// applyV2 creates name, enabling at each level above it every controller
// the level has, then writes rc for the controllers the root offers.
func (d *fsDriver) applyV2(_ context.Context, name CgroupName, rc *ResourceConfig) error {
	parent := d.root
	parts := d.parts(name)
	for i := range parts {
		if err := d.enableControllers(parent, i == 0); err != nil {
			return err
		}
		dir := filepath.Join(parent, parts[i])
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroupmgr: create %s: %w", dir, err)
		}
		parent = dir
	}
	dir := parent
	if d.rootControllers["cpu"] {
		if rc.CPUShares != nil {
			if err := writeFile(dir, "cpu.weight", strconv.FormatUint(CPUSharesToWeight(*rc.CPUShares), 10)); err != nil {
				return err
			}
		}
		if v, ok := cpuMaxValue(rc); ok {
			if err := writeFile(dir, "cpu.max", v); err != nil {
				return err
			}
		}
	}
	if d.rootControllers["memory"] && rc.Memory != nil && *rc.Memory != 0 {
		v := "max"
		if *rc.Memory > 0 {
			v = strconv.FormatInt(*rc.Memory, 10)
		}
		if err := writeFile(dir, "memory.max", v); err != nil {
			return err
		}
	}
	if d.rootControllers["pids"] && rc.PidsLimit != nil {
		if err := writeFile(dir, "pids.max", pidsValue(*rc.PidsLimit)); err != nil {
			return err
		}
	}
	if d.rootControllers["hugetlb"] && rc.HugePageLimit != nil {
		writes, err := hugePageWrites(rc, hugePageSizesIn(dir, ".max"))
		if err != nil {
			return err
		}
		for size, limit := range writes {
			if err := writeFile(dir, "hugetlb."+size+".max", strconv.FormatInt(limit, 10)); err != nil {
				return err
			}
			// The reservation limit, where the kernel has it, follows.
			rsvd := "hugetlb." + size + ".rsvd.max"
			if _, err := os.Stat(filepath.Join(dir, rsvd)); err == nil {
				if err := writeFile(dir, rsvd, strconv.FormatInt(limit, 10)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// cpuMaxValue is cpu.max ("$QUOTA $PERIOD", "max" for no quota), when rc
// sets either; zero means unset, as runc.
func cpuMaxValue(rc *ResourceConfig) (string, bool) {
	var quota int64
	var period uint64
	if rc.CPUQuota != nil {
		quota = *rc.CPUQuota
	}
	if rc.CPUPeriod != nil {
		period = *rc.CPUPeriod
	}
	if quota == 0 && period == 0 {
		return "", false
	}
	v := "max"
	if quota > 0 {
		v = strconv.FormatInt(quota, 10)
	}
	if period != 0 {
		v += " " + strconv.FormatUint(period, 10)
	}
	return v, true
}

// enableControllers turns on in dir's cgroup.subtree_control every
// controller dir has that is not on yet (runc does the same), so its
// children get them. A directory with no cgroup.controllers (not a cgroup
// v2 directory) is left alone.
func (d *fsDriver) enableControllers(dir string, isRoot bool) error {
	have := d.rootControllers
	if !isRoot {
		var err error
		have, err = readControllers(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cgroupmgr: read controllers of %s: %w", dir, err)
		}
	}
	on, err := readControllerFile(dir, "cgroup.subtree_control")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cgroupmgr: read %s/cgroup.subtree_control: %w", dir, err)
	}
	var add []string
	for c := range have {
		if !on[c] {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	sort.Strings(add)
	if err := writeFile(dir, "cgroup.subtree_control", strings.Join(add, " ")); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("%w (a cgroup v2 directory with processes of its own cannot enable controllers for children)", err)
		}
		return err
	}
	return nil
}
