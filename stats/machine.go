package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Machine reads node-level numbers from the kernel. Its paths can be
// pointed at a fake tree for tests. The zero value reads the real machine.
type Machine struct {
	// ProcDir is /proc by default.
	ProcDir string
	// CgroupDir is /sys/fs/cgroup by default. Under cgroup v1 the root
	// memory and cpuacct controllers are read from its memory/ and
	// cpuacct/ subdirectories; otherwise the numbers come from /proc.
	CgroupDir string
}

func (m Machine) proc(name string) string {
	d := m.ProcDir
	if d == "" {
		d = "/proc"
	}
	return filepath.Join(d, name)
}

func (m Machine) cgroup(name string) string {
	d := m.CgroupDir
	if d == "" {
		d = "/sys/fs/cgroup"
	}
	return filepath.Join(d, name)
}

// NodeMemory is the node's memory, computed as upstream (cadvisor's root
// container): working set is usage minus inactive file pages; available
// is capacity minus working set.
type NodeMemory struct {
	Capacity, Usage, WorkingSet, Available, RSS uint64
	PageFaults, MajorPageFaults                 uint64
}

// Memory reads the root memory cgroup (v1) or, without one, /proc/meminfo.
func (m Machine) Memory() (NodeMemory, error) {
	info, err := readKeyValues(m.proc("meminfo"), ":")
	if err != nil {
		return NodeMemory{}, err
	}
	kb := func(k string) uint64 {
		f := strings.Fields(info[k])
		if len(f) == 0 {
			return 0
		}
		v, _ := strconv.ParseUint(f[0], 10, 64)
		return v * 1024
	}
	out := NodeMemory{Capacity: kb("MemTotal")}
	if out.Capacity == 0 {
		return NodeMemory{}, fmt.Errorf("stats: no MemTotal in %s", m.proc("meminfo"))
	}
	if usage, err := readUint(m.cgroup("memory/memory.usage_in_bytes")); err == nil {
		st, err := readKeyValues(m.cgroup("memory/memory.stat"), " ")
		if err != nil {
			return NodeMemory{}, err
		}
		num := func(k string) uint64 { v, _ := strconv.ParseUint(st[k], 10, 64); return v }
		out.Usage = usage
		out.RSS = num("total_rss")
		out.PageFaults, out.MajorPageFaults = num("total_pgfault"), num("total_pgmajfault")
		out.WorkingSet = sub(usage, num("total_inactive_file"))
	} else {
		out.Usage = sub(out.Capacity, kb("MemFree"))
		out.RSS = kb("AnonPages")
		out.WorkingSet = sub(out.Usage, kb("Inactive(file)"))
	}
	out.Available = sub(out.Capacity, out.WorkingSet)
	return out, nil
}

// CPUUsage returns the node's cumulative CPU time in nanoseconds: the
// root cpuacct cgroup (v1) or the busy time in /proc/stat.
func (m Machine) CPUUsage() (uint64, error) {
	if v, err := readUint(m.cgroup("cpuacct/cpuacct.usage")); err == nil {
		return v, nil
	}
	if v, err := readUint(m.cgroup("cpu,cpuacct/cpuacct.usage")); err == nil {
		return v, nil
	}
	data, err := os.ReadFile(m.proc("stat"))
	if err != nil {
		return 0, fmt.Errorf("stats: %w", err)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("stats: unexpected first line of %s: %q", m.proc("stat"), line)
	}
	// user nice system idle iowait irq softirq steal: busy is all but idle
	// and iowait, in USER_HZ (100 on Linux).
	var ticks uint64
	for i, s := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stats: parse %s: %w", m.proc("stat"), err)
		}
		ticks += v
	}
	return ticks * 1e7, nil
}

// BootTime returns the boot time in Unix seconds (btime in /proc/stat).
func (m Machine) BootTime() (int64, error) {
	st, err := readKeyValues(m.proc("stat"), " ")
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(st["btime"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stats: no btime in %s", m.proc("stat"))
	}
	return v, nil
}

// PIDs returns the node's PID limit (the lower of kernel.pid_max and
// kernel.threads-max) and the number of tasks (from /proc/loadavg), as
// upstream.
func (m Machine) PIDs() (maxPID, running int64, err error) {
	maxPID = -1
	for _, f := range []string{"sys/kernel/pid_max", "sys/kernel/threads-max"} {
		if v, err := readUint(m.proc(f)); err == nil && (maxPID < 0 || int64(v) < maxPID) {
			maxPID = int64(v)
		}
	}
	if maxPID < 0 {
		return 0, 0, fmt.Errorf("stats: cannot read %s", m.proc("sys/kernel/pid_max"))
	}
	data, err := os.ReadFile(m.proc("loadavg"))
	if err != nil {
		return 0, 0, fmt.Errorf("stats: %w", err)
	}
	f := strings.Fields(string(data))
	if len(f) < 4 {
		return 0, 0, fmt.Errorf("stats: unexpected %s: %q", m.proc("loadavg"), data)
	}
	_, tasks, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, 0, fmt.Errorf("stats: unexpected %s: %q", m.proc("loadavg"), data)
	}
	running, err = strconv.ParseInt(tasks, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("stats: parse %s: %w", m.proc("loadavg"), err)
	}
	return maxPID, running, nil
}

// FsUsage is one filesystem's size, as statfs reports it.
type FsUsage struct {
	Capacity, Available, Used uint64
	Inodes, InodesFree        uint64
	// Device identifies the filesystem (st_dev of the path).
	Device uint64
}

// Statfs reports the filesystem holding path.
func Statfs(path string) (FsUsage, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(path, &s); err != nil {
		return FsUsage{}, fmt.Errorf("stats: statfs %s: %w", path, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return FsUsage{}, fmt.Errorf("stats: stat %s: %w", path, err)
	}
	bs := uint64(s.Bsize)
	return FsUsage{
		Capacity:   s.Blocks * bs,
		Available:  s.Bavail * bs,
		Used:       (s.Blocks - s.Bfree) * bs,
		Inodes:     s.Files,
		InodesFree: s.Ffree,
		Device:     uint64(st.Dev),
	}, nil
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stats: parse %s: %w", path, err)
	}
	return v, nil
}

// readKeyValues reads "key<sep>value" lines; the value is trimmed.
func readKeyValues(path, sep string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), sep)
		if ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("stats: read %s: %w", path, err)
	}
	return out, nil
}
