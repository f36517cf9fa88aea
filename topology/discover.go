package topology

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// HostSysfs is the host's /sys, for Discover.
func HostSysfs() fs.FS { return os.DirFS("/sys") }

// Discover reads the machine's layout from sysfs, given as a file system
// rooted at /sys (HostSysfs for the host, a fstest.MapFS in tests). It reads
// only online CPUs: the socket from topology/physical_package_id, the core
// from topology/thread_siblings_list (the lowest sibling's ID names the
// core), and the NUMA nodes, their memory (meminfo MemTotal), huge pages
// and distances from devices/system/node. A machine without NUMA support
// gets one node 0 holding every CPU, with no memory figure. Errors name the
// file that could not be read or parsed.
func Discover(ctx context.Context, sysfs fs.FS) (*Machine, error) {
	const cpuDir = "devices/system/cpu"
	online, err := readCPUList(sysfs, path.Join(cpuDir, "online"))
	if err != nil {
		return nil, err
	}
	nodes, nodeOf, err := discoverNUMA(ctx, sysfs)
	if err != nil {
		return nil, err
	}
	cpus := map[int]CPUInfo{}
	for _, cpu := range online.List() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dir := path.Join(cpuDir, "cpu"+strconv.Itoa(cpu), "topology")
		socket, err := readInt(sysfs, path.Join(dir, "physical_package_id"))
		if err != nil {
			return nil, err
		}
		if socket < 0 { // some hypervisors report -1
			socket = 0
		}
		siblings, err := readCPUList(sysfs, path.Join(dir, "thread_siblings_list"))
		if err != nil {
			return nil, err
		}
		siblings = siblings.Intersection(online)
		if siblings.IsEmpty() {
			siblings = cpuset.New(cpu)
		}
		numa, ok := nodeOf[cpu]
		if !ok && len(nodes) > 0 {
			return nil, fmt.Errorf("topology: CPU %d is online but in no NUMA node's cpulist", cpu)
		}
		cpus[cpu] = CPUInfo{Socket: socket, NUMANode: numa, Core: siblings.List()[0]}
	}
	topo, err := NewCPUTopology(cpus)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		nodes = []NUMANode{{ID: 0}}
	}
	for i := range nodes {
		nodes[i].CPUs = topo.CPUsInNUMANodes(nodes[i].ID)
	}
	return &Machine{CPU: topo, NUMANodes: nodes}, nil
}

// discoverNUMA reads devices/system/node. Without it (no NUMA support) it
// returns no nodes and no error.
func discoverNUMA(ctx context.Context, sysfs fs.FS) ([]NUMANode, map[int]int, error) {
	const nodeDir = "devices/system/node"
	entries, err := fs.ReadDir(sysfs, nodeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, map[int]int{}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("topology: read %s: %w", nodeDir, err)
	}
	var nodes []NUMANode
	nodeOf := map[int]int{}
	for _, e := range entries {
		id, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node"))
		if !strings.HasPrefix(e.Name(), "node") || err != nil || id < 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		dir := path.Join(nodeDir, e.Name())
		cpus, err := readCPUList(sysfs, path.Join(dir, "cpulist"))
		if err != nil {
			return nil, nil, err
		}
		for _, c := range cpus.UnsortedList() {
			nodeOf[c] = id
		}
		n := NUMANode{ID: id}
		if n.MemoryBytes, err = readNodeMemTotal(sysfs, path.Join(dir, "meminfo")); err != nil {
			return nil, nil, err
		}
		if n.HugePages, err = readHugePages(sysfs, path.Join(dir, "hugepages")); err != nil {
			return nil, nil, err
		}
		if n.Distances, err = readDistances(sysfs, path.Join(dir, "distance")); err != nil {
			return nil, nil, err
		}
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b NUMANode) int { return a.ID - b.ID })
	return nodes, nodeOf, nil
}

func readFile(sysfs fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(sysfs, name)
	if err != nil {
		return "", fmt.Errorf("topology: read /sys/%s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func readInt(sysfs fs.FS, name string) (int, error) {
	s, err := readFile(sysfs, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("topology: parse /sys/%s: %w", name, err)
	}
	return v, nil
}

func readCPUList(sysfs fs.FS, name string) (cpuset.CPUSet, error) {
	s, err := readFile(sysfs, name)
	if err != nil {
		return cpuset.New(), err
	}
	set, err := cpuset.Parse(s)
	if err != nil {
		return cpuset.New(), fmt.Errorf("topology: parse /sys/%s: %w", name, err)
	}
	return set, nil
}

// readNodeMemTotal parses "Node 0 MemTotal:  16318112 kB". A missing file
// is no memory figure, not an error.
func readNodeMemTotal(sysfs fs.FS, name string) (uint64, error) {
	f, err := sysfs.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("topology: read /sys/%s: %w", name, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 4 && fields[2] == "MemTotal:" {
			kb, err := strconv.ParseUint(fields[3], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("topology: parse /sys/%s: %w", name, err)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("topology: read /sys/%s: %w", name, err)
	}
	return 0, fmt.Errorf("topology: parse /sys/%s: no MemTotal line", name)
}

// readHugePages reads hugepages-<size>kB/nr_hugepages under dir.
func readHugePages(sysfs fs.FS, dir string) ([]HugePages, error) {
	entries, err := fs.ReadDir(sysfs, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("topology: read /sys/%s: %w", dir, err)
	}
	var out []HugePages
	for _, e := range entries {
		size, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(size, "kB"), 10, 64)
		if err != nil || !strings.HasSuffix(size, "kB") {
			return nil, fmt.Errorf("topology: parse huge page size of /sys/%s/%s", dir, e.Name())
		}
		count, err := readInt(sysfs, path.Join(dir, e.Name(), "nr_hugepages"))
		if err != nil {
			return nil, err
		}
		out = append(out, HugePages{PageSizeBytes: kb * 1024, Count: uint64(max(count, 0))})
	}
	slices.SortFunc(out, func(a, b HugePages) int { return cmp.Compare(a.PageSizeBytes, b.PageSizeBytes) })
	return out, nil
}

func readDistances(sysfs fs.FS, name string) ([]uint64, error) {
	s, err := readFile(sysfs, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, f := range strings.Fields(s) {
		d, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("topology: parse /sys/%s: %w", name, err)
		}
		out = append(out, d)
	}
	return out, nil
}
