package statusmgr

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine describes the node's hardware and operating system as the Node
// object reports them.
type Machine struct {
	// NumCores is the CPU capacity.
	NumCores int
	// MemoryBytes is the memory capacity (MemTotal).
	MemoryBytes uint64
	// HugePages maps a huge page size in bytes to the number of pages
	// reserved. Every size the kernel supports is listed, even with 0 pages.
	HugePages map[uint64]uint64
	// EphemeralStorageBytes is the size of the filesystem holding the
	// agent's root directory.
	EphemeralStorageBytes uint64
	// Identity and software, for status.nodeInfo. Empty when unknown.
	MachineID     string
	SystemUUID    string
	BootID        string
	KernelVersion string
	OSImage       string
}

// MachineInfo describes the machine the node runs on. HostMachine reads it
// from the host; tests describe any machine with MachineInfoFunc.
type MachineInfo interface {
	// Machine returns the machine's description. It may read files; it
	// fails only when a capacity (cpu, memory, storage) is unknown.
	Machine(ctx context.Context) (Machine, error)
}

// MachineInfoFunc adapts a function to MachineInfo.
type MachineInfoFunc func(ctx context.Context) (Machine, error)

// Machine implements MachineInfo.
func (f MachineInfoFunc) Machine(ctx context.Context) (Machine, error) { return f(ctx) }

var (
	_ MachineInfo = MachineInfoFunc(nil)
	_ MachineInfo = HostMachine{}
)

// DefaultRootDir is the agent's root directory when none is configured.
const DefaultRootDir = "/var/lib/kubelet"

// HostMachine reads the machine this process runs on from /proc, /sys and
// /etc, without cgo and without cadvisor: CPUs from the scheduler affinity
// (nproc), memory from /proc/meminfo, huge pages from
// /sys/kernel/mm/hugepages, storage from statfs of RootDir, identity from
// /etc/machine-id, /sys/class/dmi/id/product_uuid and
// /proc/sys/kernel/random/boot_id, kernel from /proc/sys/kernel/osrelease,
// OS image from /etc/os-release (PRETTY_NAME).
type HostMachine struct {
	// Root prefixes the /proc, /sys and /etc paths read; "" is "/". Tests
	// point it at a directory tree.
	Root string
	// RootDir is the agent's root directory; its filesystem's size is the
	// ephemeral-storage capacity. If it does not exist yet, its nearest
	// existing parent is measured. Default DefaultRootDir.
	RootDir string
	// NumCPU counts CPUs; nil is runtime.NumCPU.
	NumCPU func() int
}

// Machine implements MachineInfo.
func (h HostMachine) Machine(ctx context.Context) (Machine, error) {
	var m Machine
	numCPU := h.NumCPU
	if numCPU == nil {
		numCPU = runtime.NumCPU
	}
	if m.NumCores = numCPU(); m.NumCores <= 0 {
		return Machine{}, fmt.Errorf("machine info: %d CPUs", m.NumCores)
	}
	mem, err := memTotal(h.path("proc/meminfo"))
	if err != nil {
		return Machine{}, fmt.Errorf("machine info: %w", err)
	}
	m.MemoryBytes = mem
	if m.HugePages, err = hugePages(h.path("sys/kernel/mm/hugepages")); err != nil {
		return Machine{}, fmt.Errorf("machine info: %w", err)
	}
	rootDir := h.RootDir
	if rootDir == "" {
		rootDir = DefaultRootDir
	}
	if m.EphemeralStorageBytes, err = filesystemSize(rootDir); err != nil {
		return Machine{}, fmt.Errorf("machine info: %w", err)
	}
	m.MachineID = h.firstLine("etc/machine-id", "var/lib/dbus/machine-id")
	m.SystemUUID = h.firstLine("sys/class/dmi/id/product_uuid")
	m.BootID = h.firstLine("proc/sys/kernel/random/boot_id")
	m.KernelVersion = h.firstLine("proc/sys/kernel/osrelease")
	m.OSImage = osImage(h.path("etc/os-release"), h.path("usr/lib/os-release"))
	return m, nil
}

func (h HostMachine) path(rel string) string {
	root := h.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, rel)
}

// firstLine returns the first line of the first readable file, trimmed, or
// "" (identity fields are optional: a container may hide them).
func (h HostMachine) firstLine(rels ...string) string {
	for _, rel := range rels {
		b, err := os.ReadFile(h.path(rel))
		if err != nil {
			continue
		}
		line, _, _ := bytes.Cut(b, []byte("\n"))
		if s := strings.TrimSpace(string(line)); s != "" {
			return s
		}
	}
	return ""
}

// memTotal reads MemTotal (in kB) from a meminfo file.
func memTotal(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("memory capacity: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("memory capacity: %s: malformed MemTotal line %q", path, sc.Text())
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("memory capacity: %s: MemTotal: %w", path, err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("memory capacity: %s: %w", path, err)
	}
	return 0, fmt.Errorf("memory capacity: %s has no MemTotal line", path)
}

// hugePages reads nr_hugepages of every hugepages-<size>kB directory under
// dir. A kernel without huge pages (no dir) has none.
func hugePages(dir string) (map[uint64]uint64, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[uint64]uint64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("huge pages: %w", err)
	}
	out := make(map[uint64]uint64, len(entries))
	for _, e := range entries {
		sizeKB, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		sizeKB, ok = strings.CutSuffix(sizeKB, "kB")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(sizeKB, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("huge pages: %s: bad page size: %w", e.Name(), err)
		}
		file := filepath.Join(dir, e.Name(), "nr_hugepages")
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("huge pages: %w", err)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("huge pages: %s: %w", file, err)
		}
		out[kb*1024] = n
	}
	return out, nil
}

// filesystemSize is the size in bytes of the filesystem holding path, or of
// its nearest existing parent.
func filesystemSize(path string) (uint64, error) {
	p, err := filepath.Abs(path)
	if err != nil {
		return 0, fmt.Errorf("ephemeral storage: %w", err)
	}
	for {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			return st.Blocks * uint64(st.Bsize), nil
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, unix.ENOENT) || parent == p {
			return 0, fmt.Errorf("ephemeral storage: statfs %s: %w", p, err)
		}
		p = parent
	}
}

// osImage is PRETTY_NAME from the first os-release file found, else
// "Linux".
func osImage(paths ...string) string {
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME=")
			if !ok {
				continue
			}
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			} else {
				v = strings.Trim(v, `"'`)
			}
			if v != "" {
				return v
			}
		}
	}
	return "Linux"
}
