package topology

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/internal/itest"
)

// sysfsOf renders m as the sysfs files Discover reads, with the kernel's
// per-socket core_id numbering (which Discover must not rely on).
func sysfsOf(m *Machine) fstest.MapFS {
	fsys := fstest.MapFS{}
	put := func(name, content string) { fsys[name] = &fstest.MapFile{Data: []byte(content + "\n")} }
	topo := m.CPU
	put("devices/system/cpu/online", topo.CPUs().String())
	for _, cpu := range topo.CPUs().List() {
		ci, _ := topo.Info(cpu)
		dir := fmt.Sprintf("devices/system/cpu/cpu%d/topology/", cpu)
		put(dir+"physical_package_id", fmt.Sprint(ci.Socket))
		put(dir+"core_id", fmt.Sprint(ci.Core%7)) // repeats across sockets, as on real machines
		put(dir+"thread_siblings_list", topo.CPUsInCores(ci.Core).String())
	}
	for _, n := range m.NUMANodes {
		dir := fmt.Sprintf("devices/system/node/node%d/", n.ID)
		put(dir+"cpulist", n.CPUs.String())
		put(dir+"meminfo", fmt.Sprintf("Node %d MemTotal:       %d kB\nNode %d MemFree:        1 kB", n.ID, n.MemoryBytes/1024, n.ID))
		var d []string
		for _, v := range n.Distances {
			d = append(d, fmt.Sprint(v))
		}
		put(dir+"distance", strings.Join(d, " "))
		for _, hp := range n.HugePages {
			put(fmt.Sprintf("%shugepages/hugepages-%dkB/nr_hugepages", dir, hp.PageSizeBytes/1024), fmt.Sprint(hp.Count))
		}
	}
	put("devices/system/node/online", "0-1")
	return fsys
}

func TestSyntheticTwoSocket64CPUs(t *testing.T) {
	m, err := Synthetic(Layout{Sockets: 2, CoresPerSocket: 16, ThreadsPerCore: 2, MemoryPerNUMANode: 64 << 30})
	if err != nil {
		t.Fatal(err)
	}
	topo := m.CPU
	if topo.NumCPUs() != 64 || topo.NumCores() != 32 || topo.NumSockets() != 2 || topo.NumNUMANodes() != 2 || topo.CPUsPerCore() != 2 {
		t.Fatalf("topology %v", topo)
	}
	if got := topo.CPUsInCores(0).String(); got != "0,32" {
		t.Errorf("core 0 = %s, want 0,32", got)
	}
	if got := topo.CPUsInSockets(1).String(); got != "16-31,48-63" {
		t.Errorf("socket 1 = %s", got)
	}
	if got := m.NUMANodes[1].CPUs.String(); got != "16-31,48-63" || m.NUMANodes[1].MemoryBytes != 64<<30 {
		t.Errorf("NUMA node 1 = %+v", m.NUMANodes[1])
	}
}

func TestDiscoverReadsWhatSyntheticDescribes(t *testing.T) {
	for _, l := range []Layout{
		{Sockets: 1, CoresPerSocket: 2},
		{Sockets: 2, CoresPerSocket: 16, ThreadsPerCore: 2, MemoryPerNUMANode: 64 << 30,
			HugePagesPerNUMANode: []HugePages{{PageSizeBytes: 2 << 20, Count: 512}, {PageSizeBytes: 1 << 30, Count: 2}}},
		{Sockets: 2, NUMANodesPerSocket: 2, CoresPerSocket: 20, ThreadsPerCore: 2, MemoryPerNUMANode: 16 << 30},
		{Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 4},
	} {
		want, err := Synthetic(l)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Discover(t.Context(), sysfsOf(want))
		if err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		if !reflect.DeepEqual(got.CPU.info, want.CPU.info) {
			t.Errorf("%+v: CPUs differ:\n got %v\nwant %v", l, got.CPU.info, want.CPU.info)
		}
		if !reflect.DeepEqual(got.NUMANodes, want.NUMANodes) {
			t.Errorf("%+v: NUMA nodes differ:\n got %+v\nwant %+v", l, got.NUMANodes, want.NUMANodes)
		}
	}
}

func TestDiscoverWithoutNUMAAndOfflineCPUs(t *testing.T) {
	fsys := fstest.MapFS{
		"devices/system/cpu/online":                             {Data: []byte("0,2-3\n")},
		"devices/system/cpu/cpu0/topology/physical_package_id":  {Data: []byte("0\n")},
		"devices/system/cpu/cpu0/topology/thread_siblings_list": {Data: []byte("0-1\n")},
		"devices/system/cpu/cpu2/topology/physical_package_id":  {Data: []byte("-1\n")},
		"devices/system/cpu/cpu2/topology/thread_siblings_list": {Data: []byte("2-3\n")},
		"devices/system/cpu/cpu3/topology/physical_package_id":  {Data: []byte("-1\n")},
		"devices/system/cpu/cpu3/topology/thread_siblings_list": {Data: []byte("2-3\n")},
	}
	m, err := Discover(t.Context(), fsys)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.NUMANodes) != 1 || !m.NUMANodes[0].CPUs.Equals(cpuset.New(0, 2, 3)) {
		t.Fatalf("NUMA nodes %+v", m.NUMANodes)
	}
	if c, _ := m.CPU.CoreOf(0); c != 0 || m.CPU.CPUsInCores(2).String() != "2-3" || m.CPU.NumSockets() != 1 {
		t.Fatalf("topology %v: core of 0 = %d", m.CPU, c)
	}
}

func TestDiscoverErrorsNameTheFile(t *testing.T) {
	m, _ := Synthetic(Layout{Sockets: 1, CoresPerSocket: 2})
	for name, mutate := range map[string]func(fstest.MapFS){
		"cpu1/topology/physical_package_id": func(f fstest.MapFS) {
			f["devices/system/cpu/cpu1/topology/physical_package_id"].Data = []byte("zero")
		},
		"cpu/online":    func(f fstest.MapFS) { delete(f, "devices/system/cpu/online") },
		"node0/cpulist": func(f fstest.MapFS) { f["devices/system/node/node0/cpulist"].Data = []byte("0-") },
	} {
		fsys := sysfsOf(m)
		mutate(fsys)
		_, err := Discover(t.Context(), fsys)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("broken %s: error %v does not name it", name, err)
		}
	}
}

func TestDiscoverHost(t *testing.T) {
	m, err := Discover(t.Context(), HostSysfs())
	if err != nil {
		itest.Require(t, "a readable sysfs", err)
	}
	if m.CPU.NumCPUs() == 0 || len(m.NUMANodes) == 0 {
		t.Fatalf("host machine %v with nodes %+v", m.CPU, m.NUMANodes)
	}
	t.Logf("host: %v; NUMA node 0 has %d MiB", m.CPU, m.NUMANodes[0].MemoryBytes>>20)
}

func TestNewCPUTopologyRejectsSplitCores(t *testing.T) {
	_, err := NewCPUTopology(map[int]CPUInfo{0: {Socket: 0, Core: 0}, 1: {Socket: 1, Core: 0}})
	if err == nil || !strings.Contains(err.Error(), "core 0") {
		t.Fatalf("core spanning sockets: %v", err)
	}
	if _, err := NewCPUTopology(map[int]CPUInfo{-1: {}}); err == nil {
		t.Fatal("negative CPU ID accepted")
	}
}
