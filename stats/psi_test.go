package stats

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
)

type fakePodCgroups map[types.UID]string

func (f fakePodCgroups) PodCgroup(uid types.UID) (string, bool) { p, ok := f[uid]; return p, ok }

var _ PodCgroups = fakePodCgroups(nil)

const podCg = "/kubepods/burstable/poduid-1"

// psiOf is a distinct PSI block derived from n, and pressureFile the
// file the kernel would write for it.
func psiOf(n float64) *statsapi.PSIStats {
	return &statsapi.PSIStats{
		Some: statsapi.PSIData{Avg10: n + 0.25, Avg60: n + 0.5, Avg300: n + 0.75, Total: uint64(n * 1e6)},
		Full: statsapi.PSIData{Avg10: n / 4, Avg60: n / 2, Avg300: n, Total: uint64(n * 1e3)},
	}
}

func pressureFile(p *statsapi.PSIStats) string {
	line := func(kind string, d statsapi.PSIData) string {
		return fmt.Sprintf("%s avg10=%.2f avg60=%.2f avg300=%.2f total=%d\n", kind, d.Avg10, d.Avg60, d.Avg300, d.Total)
	}
	return line("some", p.Some) + line("full", p.Full)
}

var zeroPSI = &statsapi.PSIStats{}

// fakeProc is enough of /proc for the node's numbers.
func fakeProc(t *testing.T, root string) {
	writeFiles(t, root, map[string]string{
		"proc/meminfo": meminfo, "proc/stat": "cpu 1 2 3 4 5 6 7 8\nbtime 100\n",
		"proc/loadavg": "0.1 0.1 0.1 1/100 5\n", "proc/sys/kernel/pid_max": "4096\n",
	})
}

// psiProvider is a provider over a fake machine and a runtime with one
// pod: app (c2, cgroupfs-named cgroup), side (c3, systemd-named) and
// gone (c4, no cgroup).
func psiProvider(t *testing.T, root string) *Provider {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	at := clk.Now()
	cri := &fakeCRI{mount: root, noSandbox: true, containers: []*runtimeapi.ContainerStats{
		ctrStats("c2", "app", 0, 1e9, 10, 1, at), ctrStats("c3", "side", 0, 1e9, 10, 1, at), ctrStats("c4", "gone", 0, 1e9, 10, 1, at)}}
	p, err := New(Config{RootDir: root, PodLogsDir: filepath.Join(root, "logs"), Runtime: cri, Clock: clk,
		Machine:    Machine{ProcDir: filepath.Join(root, "proc"), CgroupDir: filepath.Join(root, "cg")},
		PodCgroups: fakePodCgroups{"uid-1": podCg}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// psiBlocks are the PSI blocks of one Summary, by place.
func psiBlocks(sum *statsapi.Summary) map[string]*statsapi.PSIStats {
	out := map[string]*statsapi.PSIStats{}
	add := func(where string, cpu *statsapi.CPUStats, mem *statsapi.MemoryStats, io *statsapi.IOStats) {
		if cpu != nil {
			out[where+"/cpu"] = cpu.PSI
		}
		if mem != nil {
			out[where+"/memory"] = mem.PSI
		}
		if io != nil {
			out[where+"/io"] = io.PSI
		} else {
			out[where+"/io"] = &statsapi.PSIStats{Some: statsapi.PSIData{Total: 1 << 63}} // marks "no IO block"
		}
	}
	add("node", sum.Node.CPU, sum.Node.Memory, sum.Node.IO)
	for _, ps := range sum.Pods {
		add("pod", ps.CPU, ps.Memory, ps.IO)
		for _, c := range ps.Containers {
			add(c.Name, c.CPU, c.Memory, c.IO)
		}
	}
	return out
}

var noIO = &statsapi.PSIStats{Some: statsapi.PSIData{Total: 1 << 63}}

func checkBlocks(t *testing.T, got, want map[string]*statsapi.PSIStats) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
			t.Errorf("%s: psi = %+v (present %v), want %+v", k, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d blocks, want %d: %v", len(got), len(want), got)
	}
}

func TestSummaryPressureV2(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root)
	files := map[string]string{"cg/cgroup.controllers": "cpu memory io pids\n"}
	for dir, n := range map[string]float64{"": 1, podCg: 2, podCg + "/c2": 3, podCg + "/cri-containerd-c3.scope": 4} {
		files[filepath.Join("cg", dir, "cpu.pressure")] = pressureFile(psiOf(n))
		files[filepath.Join("cg", dir, "memory.pressure")] = pressureFile(psiOf(n + 10))
		files[filepath.Join("cg", dir, "io.pressure")] = pressureFile(psiOf(n + 20))
	}
	files["cg"+podCg+"/memory.max"] = "max\n"
	files["cg"+podCg+"/c2/memory.max"] = "max\n" // c3 has none: no memory block, as cadvisor's HasMemory
	delete(files, "cg"+podCg+"/c2/io.pressure")  // a missing file gives zeros
	writeFiles(t, root, files)
	sum, err := psiProvider(t, root).Summary(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	checkBlocks(t, psiBlocks(sum), map[string]*statsapi.PSIStats{
		"node/cpu": psiOf(1), "node/memory": psiOf(11), "node/io": psiOf(21),
		"pod/cpu": psiOf(2), "pod/memory": psiOf(12), "pod/io": psiOf(22),
		"app/cpu": psiOf(3), "app/memory": psiOf(13), "app/io": zeroPSI,
		"side/cpu": psiOf(4), "side/memory": nil, "side/io": psiOf(24),
		"gone/cpu": nil, "gone/memory": nil, "gone/io": nil,
	})
	if got := sum.Node.CPU.PSI.Some; got.Total != 1e6 || got.Avg10 != 1.25 || got.Avg60 != 1.5 || got.Avg300 != 1.75 {
		t.Errorf("node cpu some = %+v, want the file's total (µs) and averages", got)
	}

	only, err := psiProvider(t, root).Summary(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	checkBlocks(t, psiBlocks(only), map[string]*statsapi.PSIStats{
		"node/cpu": psiOf(1), "node/memory": psiOf(11), "node/io": noIO,
		"pod/cpu": psiOf(2), "pod/memory": psiOf(12), "pod/io": noIO,
		"app/cpu": psiOf(3), "app/memory": psiOf(13), "app/io": noIO,
		"side/cpu": psiOf(4), "side/memory": nil, "side/io": noIO,
		"gone/cpu": nil, "gone/memory": nil, "gone/io": noIO,
	})
}

// Under cgroup v1 kubelet reports zero blocks for the controllers a
// cgroup is in, and ignores the hybrid unified mount's pressure files.
func TestSummaryPressureV1(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root)
	files := map[string]string{
		"cg/unified/cgroup.controllers": "", "cg/unified/cpu.pressure": pressureFile(psiOf(5)),
		"cg/unified" + podCg + "/c2/cpu.pressure": pressureFile(psiOf(6)),
	}
	for _, c := range []string{"cpu,cpuacct", "memory", "blkio"} {
		files[filepath.Join("cg", c, podCg, "c2", "tasks")] = ""
	}
	files[filepath.Join("cg", "memory", podCg, "cri-containerd-c3.scope", "tasks")] = "" // memory only
	writeFiles(t, root, files)
	sum, err := psiProvider(t, root).Summary(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	checkBlocks(t, psiBlocks(sum), map[string]*statsapi.PSIStats{
		"node/cpu": zeroPSI, "node/memory": zeroPSI, "node/io": zeroPSI,
		"pod/cpu": zeroPSI, "pod/memory": zeroPSI, "pod/io": zeroPSI,
		"app/cpu": zeroPSI, "app/memory": zeroPSI, "app/io": zeroPSI,
		"side/cpu": nil, "side/memory": zeroPSI, "side/io": nil,
		"gone/cpu": nil, "gone/memory": nil, "gone/io": nil,
	})
}

// Without a pod cgroup the pod has no PSI and an IO block with only a
// time (upstream sums the containers, which gives no PSI).
func TestSummaryPressureNoPodCgroup(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root)
	writeFiles(t, root, map[string]string{"cg/memory/tasks": "", "cg/blkio/tasks": "", "cg/cpu,cpuacct/tasks": ""})
	sum, err := psiProvider(t, root).Summary(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	ps := sum.Pods[0]
	if ps.CPU.PSI != nil || ps.Memory.PSI != nil || ps.IO == nil || ps.IO.PSI != nil || ps.IO.Time.IsZero() {
		t.Errorf("pod without cgroup: cpu psi %v memory psi %v io %+v", ps.CPU.PSI, ps.Memory.PSI, ps.IO)
	}
	if sum.Node.CPU.PSI == nil || sum.Node.IO == nil {
		t.Errorf("node psi %v io %v, want zero blocks", sum.Node.CPU.PSI, sum.Node.IO)
	}
}

// A malformed pressure file leaves its block out; the rest is reported.
func TestSummaryPressureMalformed(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root)
	writeFiles(t, root, map[string]string{
		"cg/cgroup.controllers": "", "cg" + podCg + "/memory.max": "max\n",
		"cg" + podCg + "/cpu.pressure":    "some avg10=zero avg60=0.00 avg300=0.00 total=1\n",
		"cg" + podCg + "/memory.pressure": pressureFile(psiOf(7)),
	})
	sum, err := psiProvider(t, root).Summary(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	ps := sum.Pods[0]
	if ps.CPU.PSI != nil || !reflect.DeepEqual(ps.Memory.PSI, psiOf(7)) || !reflect.DeepEqual(ps.IO.PSI, zeroPSI) {
		t.Errorf("pod cpu psi %+v memory psi %+v io %+v", ps.CPU.PSI, ps.Memory.PSI, ps.IO)
	}
}

// The JSON carries zero blocks in full (no omitempty inside psi) and
// omits the absent ones, as kubelet's.
func TestSummaryPressureJSON(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root)
	writeFiles(t, root, map[string]string{"cg/memory" + podCg + "/c2/tasks": "", "cg/cpu,cpuacct" + podCg + "/c2/tasks": "",
		"cg/blkio" + podCg + "/c2/tasks": ""})
	sum, err := psiProvider(t, root).Summary(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Node struct {
			CPU, Memory, IO map[string]json.RawMessage
		}
		Pods []struct {
			IO         map[string]json.RawMessage
			Containers []struct {
				Name            string
				CPU, Memory, IO map[string]json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	const zero = `{"full":{"total":0,"avg10":0,"avg60":0,"avg300":0},"some":{"total":0,"avg10":0,"avg60":0,"avg300":0}}`
	for name, m := range map[string]map[string]json.RawMessage{"node.cpu": doc.Node.CPU, "node.memory": doc.Node.Memory, "node.io": doc.Node.IO, "pod.io": doc.Pods[0].IO} {
		if string(m["psi"]) != zero {
			t.Errorf("%s.psi = %s, want %s", name, m["psi"], zero)
		}
	}
	for _, c := range doc.Pods[0].Containers {
		_, cpu := c.CPU["psi"]
		_, io := c.IO["psi"]
		_, hasTime := c.IO["time"]
		if want := c.Name == "app"; cpu != want || io != want || !hasTime {
			t.Errorf("container %s: cpu psi %v io psi %v io time %v, want psi %v", c.Name, cpu, io, hasTime, want)
		}
	}
}
