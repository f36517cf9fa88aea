package stats

import (
	"os"
	"path/filepath"
	"testing"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const meminfo = `MemTotal:        8000000 kB
MemFree:         1000000 kB
MemAvailable:    5000000 kB
AnonPages:       2000000 kB
Inactive(file):  3000000 kB
`

func TestMachineMemoryCgroupV1(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"proc/meminfo":                    meminfo,
		"cg/memory/memory.usage_in_bytes": "6000000000\n",
		"cg/memory/memory.stat":           "cache 1\nrss 2\ntotal_rss 1500000000\ntotal_inactive_file 2000000000\ntotal_pgfault 7\ntotal_pgmajfault 3\n",
	})
	m := Machine{ProcDir: filepath.Join(root, "proc"), CgroupDir: filepath.Join(root, "cg")}
	got, err := m.Memory()
	if err != nil {
		t.Fatal(err)
	}
	want := NodeMemory{Capacity: 8000000 * 1024, Usage: 6000000000, WorkingSet: 4000000000,
		Available: 8000000*1024 - 4000000000, RSS: 1500000000, PageFaults: 7, MajorPageFaults: 3}
	if got != want {
		t.Errorf("memory = %+v, want %+v", got, want)
	}
}

func TestMachineMemoryFromMeminfo(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"proc/meminfo": meminfo})
	m := Machine{ProcDir: filepath.Join(root, "proc"), CgroupDir: filepath.Join(root, "none")}
	got, err := m.Memory()
	if err != nil {
		t.Fatal(err)
	}
	// usage = total - free = 7e6 kB; working set = usage - inactive file = 4e6 kB.
	if got.Usage != 7000000*1024 || got.WorkingSet != 4000000*1024 || got.Available != 4000000*1024 {
		t.Errorf("memory = %+v", got)
	}
}

func TestMachineCPUAndPIDs(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"proc/stat":                   "cpu  100 10 50 1000 20 5 5 10 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\nbtime 1700000000\n",
		"proc/sys/kernel/pid_max":     "4194304\n",
		"proc/sys/kernel/threads-max": "62000\n",
		"proc/loadavg":                "0.10 0.20 0.30 2/345 9999\n",
	})
	m := Machine{ProcDir: filepath.Join(root, "proc"), CgroupDir: filepath.Join(root, "none")}
	cpu, err := m.CPUUsage()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(100+10+50+5+5+10) * 1e7; cpu != want {
		t.Errorf("cpu = %d, want %d", cpu, want)
	}
	if bt, err := m.BootTime(); err != nil || bt != 1700000000 {
		t.Errorf("boot time = %d, %v", bt, err)
	}
	maxPID, running, err := m.PIDs()
	if err != nil || maxPID != 62000 || running != 345 {
		t.Errorf("pids = %d/%d, %v", running, maxPID, err)
	}
	writeFiles(t, root, map[string]string{"cg/cpuacct/cpuacct.usage": "123456789\n"})
	m.CgroupDir = filepath.Join(root, "cg")
	if cpu, err := m.CPUUsage(); err != nil || cpu != 123456789 {
		t.Errorf("cgroup cpu = %d, %v", cpu, err)
	}
}

func TestMachineRealSmoke(t *testing.T) {
	var m Machine
	mem, err := m.Memory()
	if err != nil || mem.Capacity == 0 || mem.WorkingSet == 0 || mem.Available > mem.Capacity {
		t.Errorf("memory = %+v, %v", mem, err)
	}
	if cpu, err := m.CPUUsage(); err != nil || cpu == 0 {
		t.Errorf("cpu = %d, %v", cpu, err)
	}
	if maxPID, running, err := m.PIDs(); err != nil || maxPID <= 0 || running <= 0 {
		t.Errorf("pids = %d/%d, %v", running, maxPID, err)
	}
	fs, err := Statfs(t.TempDir())
	if err != nil || fs.Capacity == 0 || fs.Available > fs.Capacity || fs.Inodes == 0 && fs.InodesFree != 0 {
		t.Errorf("statfs = %+v, %v", fs, err)
	}
}

func TestDu(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"a/one": string(make([]byte, 10000)), "a/sub/two": "x"})
	if err := os.Link(filepath.Join(root, "a/one"), filepath.Join(root, "a/link")); err != nil {
		t.Fatal(err)
	}
	u, err := Du(filepath.Join(root, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if u.Inodes != 4 { // a, one (linked twice), sub, two
		t.Errorf("inodes = %d, want 4", u.Inodes)
	}
	if u.Bytes < 10000 {
		t.Errorf("bytes = %d, want at least 10000", u.Bytes)
	}
	if u, err := Du(filepath.Join(root, "missing")); err != nil || u != (DiskUsage{}) {
		t.Errorf("missing = %+v, %v", u, err)
	}
}
