package containermetrics

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// hierarchy locates the cgroup controllers: under cgroup v2 one unified
// tree, under v1 a directory per controller (cpu, cpuacct, memory, pids,
// blkio) below the mount root.
type hierarchy struct {
	root    string // /sys/fs/cgroup
	unified bool
	// psi: the unified hierarchy has pressure files (psiEnabled).
	psi bool
}

// detectHierarchy reads root: a cgroup.controllers file at the root means
// cgroup v2 (unified); otherwise the v1 controller directories are used.
// A v1 machine's empty v2 mount (root/unified) is ignored, as cadvisor
// does.
func detectHierarchy(root string) (hierarchy, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return hierarchy{root: root, unified: true, psi: psiEnabled(root)}, nil
	}
	if _, err := os.Stat(filepath.Join(root, "memory")); err != nil {
		return hierarchy{}, fmt.Errorf("containermetrics: no cgroup v2 or v1 memory controller under %s: %w", root, err)
	}
	return hierarchy{root: root}, nil
}

// dir is the directory of cgroup name (e.g. /kubepods/burstable) for a
// v1 controller, or the unified directory.
func (h hierarchy) dir(controller, name string) string {
	if h.unified {
		return filepath.Join(h.root, name)
	}
	return filepath.Join(h.root, controller, name)
}

// walkDir is the tree the cgroups are discovered in: the memory
// controller's (v1) or the unified one.
func (h hierarchy) walkDir() string { return h.dir("memory", "/") }

// cgroupStats is one cgroup's numbers, as cadvisor's ContainerStats and
// ContainerSpec carry them (only the fields nodekit serves).
type cgroupStats struct {
	created time.Time

	hasCPU                    bool
	cpuShares, cpuPeriod      uint64
	cpuQuota                  uint64 // 0: no quota
	cpuTotal, cpuUser, cpuSys uint64 // nanoseconds
	periods, throttled        uint64
	throttledNS               uint64

	hasMemory                            bool
	memLimit, memSwapLimit, memReserve   uint64
	memUsage, memMaxUsage, memFailcnt    uint64
	memCache, memRSS, memSwap, memMapped uint64
	memKernel, pgfault, pgmajfault       uint64
	// memV2 holds memory.stat keys only cgroup v2 has (file_dirty,
	// pgscan, ...) and memory.events' high and max; zero under v1.
	memV2 map[string]uint64
	// oomKills counts the cgroup's OOM kills (memory.oom_control's or
	// memory.events' oom_kill).
	oomKills                       uint64
	memWorkingSet                  uint64
	memActiveFile, memInactiveFile uint64

	hasPids           bool
	pidsLimit, thread uint64 // pids.max, pids.current

	// procs are the processes directly in the cgroup (cpu controller's
	// cgroup.procs, as cadvisor counts them).
	procs []int
	// fds and sockets are the procs' open files and sockets.
	fds, sockets uint64
	// net is the network of the cgroup's network namespace (root and
	// sandboxes only).
	net []netDev
	// fs are the machine's filesystems (root only).
	fs []fsStat
	// blkio are the cgroup's own block I/O counters (v1 blkio).
	blkio blkioStats
	// ulimits are the cgroup's root process's soft limits (root,
	// containers and sandboxes only).
	ulimits []ulimit
	// pressure is the cgroup's PSI (v2 with PSI enabled only; nil
	// otherwise).
	pressure *pressure
}

// read reads cgroup name in every controller. A controller whose
// directory is gone (the cgroup was removed meanwhile) is left out; if
// every one is gone the error wraps fs.ErrNotExist.
func (h hierarchy) read(name string, bootTime time.Time) (*cgroupStats, error) {
	s := &cgroupStats{}
	s.created = h.creationTime(name, bootTime)
	if s.created.IsZero() {
		return nil, fmt.Errorf("containermetrics: cgroup %s: %w", name, fs.ErrNotExist)
	}
	if h.unified {
		h.readV2(name, s)
	} else {
		h.readV1(name, s)
	}
	s.procs = readPids(filepath.Join(h.dir("cpu", name), "cgroup.procs"))
	return s, nil
}

// creationTime is the earliest modification time of the cgroup's
// directories and of their cgroup.clone_children (v1) or cgroup.events
// (v2), which a child's creation does not touch; never before boot. Zero
// when no directory exists.
func (h hierarchy) creationTime(name string, bootTime time.Time) time.Time {
	var lowest time.Time
	consider := func(p string) bool {
		fi, err := os.Stat(p)
		if err != nil {
			return false
		}
		if lowest.IsZero() || fi.ModTime().Before(lowest) {
			lowest = fi.ModTime()
		}
		return true
	}
	controllers := []string{"cpu", "cpuacct", "memory", "pids", "blkio", "cpuset"}
	marker := "cgroup.clone_children"
	if h.unified {
		controllers, marker = []string{""}, "cgroup.events"
	}
	for _, c := range controllers {
		d := h.dir(c, name)
		if consider(d) {
			consider(filepath.Join(d, marker))
		}
	}
	if !lowest.IsZero() && lowest.Before(bootTime) {
		lowest = bootTime
	}
	return lowest
}

func (h hierarchy) readV1(name string, s *cgroupStats) {
	cpu := h.dir("cpu", name)
	if dirExists(cpu) {
		s.hasCPU = true
		s.cpuShares = readUint(cpu, "cpu.shares")
		s.cpuPeriod = readUint(cpu, "cpu.cfs_period_us")
		if q, err := strconv.ParseInt(readString(cpu, "cpu.cfs_quota_us"), 10, 64); err == nil && q > 0 {
			s.cpuQuota = uint64(q)
		}
		st := readFlatKeyed(cpu, "cpu.stat")
		s.periods, s.throttled, s.throttledNS = st["nr_periods"], st["nr_throttled"], st["throttled_time"]
	}
	acct := h.dir("cpuacct", name)
	s.cpuTotal = readUint(acct, "cpuacct.usage")
	if fileExists(filepath.Join(acct, "cpuacct.usage_user")) {
		s.cpuUser, s.cpuSys = readUint(acct, "cpuacct.usage_user"), readUint(acct, "cpuacct.usage_sys")
	} else {
		// cpuacct.stat counts USER_HZ (100 per second) ticks.
		st := readFlatKeyed(acct, "cpuacct.stat")
		s.cpuUser, s.cpuSys = st["user"]*uint64(10*time.Millisecond), st["system"]*uint64(10*time.Millisecond)
	}
	mem := h.dir("memory", name)
	if dirExists(mem) {
		s.hasMemory = true
		s.memLimit = readUint(mem, "memory.limit_in_bytes")
		s.memSwapLimit = readUint(mem, "memory.memsw.limit_in_bytes")
		s.memReserve = readUint(mem, "memory.soft_limit_in_bytes")
		s.memUsage = readUint(mem, "memory.usage_in_bytes")
		s.memMaxUsage = readUint(mem, "memory.max_usage_in_bytes")
		s.memFailcnt = readUint(mem, "memory.failcnt")
		st := readFlatKeyed(mem, "memory.stat")
		prefix := ""
		if readUint(mem, "memory.use_hierarchy") == 1 {
			prefix = "total_"
		}
		s.memCache, s.memRSS = st[prefix+"cache"], st[prefix+"rss"]
		s.memSwap, s.memMapped = st[prefix+"swap"], st[prefix+"mapped_file"]
		s.memActiveFile, s.memInactiveFile = st["total_active_file"], st["total_inactive_file"]
		s.memWorkingSet = sub(s.memUsage, s.memInactiveFile)
		s.memKernel = readUint(mem, "memory.kmem.usage_in_bytes")
		s.oomKills = readFlatKeyed(mem, "memory.oom_control")["oom_kill"]
		s.pgfault, s.pgmajfault = st["pgfault"], st["pgmajfault"]
	}
	pids := h.dir("pids", name)
	if dirExists(pids) {
		s.hasPids = true
		s.pidsLimit = readUint(pids, "pids.max")
		s.thread = readUint(pids, "pids.current")
	}
}

func (h hierarchy) readV2(name string, s *cgroupStats) {
	d := h.dir("", name)
	if h.psi {
		s.pressure = readPressure(d)
	}
	if fileExists(filepath.Join(d, "cpu.stat")) {
		st := readFlatKeyed(d, "cpu.stat")
		s.cpuTotal, s.cpuUser, s.cpuSys = st["usage_usec"]*1000, st["user_usec"]*1000, st["system_usec"]*1000
		s.periods, s.throttled, s.throttledNS = st["nr_periods"], st["nr_throttled"], st["throttled_usec"]*1000
	}
	if fileExists(filepath.Join(d, "cpu.max")) || fileExists(filepath.Join(d, "cpu.weight")) {
		s.hasCPU = true
		if w := readUint(d, "cpu.weight"); w >= 1 && w <= 10000 {
			// The inverse of the shares-to-weight mapping runc applies.
			s.cpuShares = 2 + ((w-1)*262142)/9999
		}
		if quota, period, ok := strings.Cut(readString(d, "cpu.max"), " "); ok {
			if quota != "max" {
				s.cpuQuota, _ = strconv.ParseUint(quota, 10, 64)
			}
			s.cpuPeriod, _ = strconv.ParseUint(period, 10, 64)
		}
	}
	if fileExists(filepath.Join(d, "memory.max")) {
		s.hasMemory = true
		s.memLimit, s.memSwapLimit, s.memReserve = readUint(d, "memory.max"), readUint(d, "memory.swap.max"), readUint(d, "memory.min")
		s.memUsage, s.memMaxUsage = readUint(d, "memory.current"), readUint(d, "memory.peak")
		st := readFlatKeyed(d, "memory.stat")
		s.memCache, s.memRSS, s.memMapped = st["file"], st["anon"], st["file_mapped"]
		if sw := readUint(d, "memory.swap.current"); sw > 0 {
			s.memSwap = sw
		}
		s.memFailcnt = readFlatKeyed(d, "memory.events")["max"]
		s.memActiveFile, s.memInactiveFile = st["active_file"], st["inactive_file"]
		s.memWorkingSet = sub(s.memUsage, s.memInactiveFile)
		s.memKernel = st["kernel"]
		ev := readFlatKeyed(d, "memory.events")
		s.oomKills = ev["oom_kill"]
		s.memV2 = map[string]uint64{"events_high": ev["high"], "events_max": ev["max"]}
		for _, k := range []string{"file_dirty", "file_writeback", "pgscan", "pgsteal", "workingset_refault_file", "workingset_refault_anon"} {
			s.memV2[k] = st[k]
		}
		s.pgfault, s.pgmajfault = st["pgfault"], st["pgmajfault"]
	}
	if fileExists(filepath.Join(d, "pids.max")) {
		s.hasPids = true
		s.pidsLimit, s.thread = readUint(d, "pids.max"), readUint(d, "pids.current")
	}
}

// children lists the cgroups below name (recursively), as names.
func (h hierarchy) children(name string) ([]string, error) {
	base := h.walkDir()
	var out []string
	err := filepath.WalkDir(filepath.Join(base, name), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(base, p)
		if err != nil {
			return err
		}
		out = append(out, "/"+strings.TrimPrefix(filepath.ToSlash(rel), "./"))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("containermetrics: walk cgroups under %s: %w", name, err)
	}
	return out, nil
}

// readUint reads a one-number file; "max" is the largest value, and a
// missing or unreadable file is 0 (cadvisor's reading).
func readUint(dir, file string) uint64 {
	s := readString(dir, file)
	if s == "max" {
		return math.MaxUint64
	}
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

func readString(dir, file string) string {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readFlatKeyed reads "key value" lines (cpu.stat, memory.stat).
func readFlatKeyed(dir, file string) map[string]uint64 {
	out := map[string]uint64{}
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

func readPids(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
