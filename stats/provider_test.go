package stats

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestNanoCores(t *testing.T) {
	t0 := time.Unix(100, 0)
	tests := []struct {
		name      string
		prev, cur CPUSample
		want      uint64
		ok        bool
	}{
		{"half a core", CPUSample{1e9, t0}, CPUSample{2e9, t0.Add(2 * time.Second)}, 5e8, true},
		{"two cores", CPUSample{0, t0}, CPUSample{4e9, t0.Add(2 * time.Second)}, 2e9, true},
		{"same time", CPUSample{0, t0}, CPUSample{1, t0}, 0, false},
		{"counter reset", CPUSample{5e9, t0}, CPUSample{1e9, t0.Add(time.Second)}, 0, false},
	}
	for _, tt := range tests {
		got, ok := NanoCores(tt.prev, tt.cur)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: got %d %v, want %d %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCPURatesMinInterval(t *testing.T) {
	c := &cpuRates{minInterval: time.Second}
	t0 := time.Unix(100, 0)
	if _, ok := c.rate("k", CPUSample{0, t0}); ok {
		t.Error("rate from one sample")
	}
	if r, ok := c.rate("k", CPUSample{1e9, t0.Add(2 * time.Second)}); !ok || r != 5e8 {
		t.Errorf("rate = %d %v", r, ok)
	}
	// A reading 100ms later reuses the stored rate instead of a noisy one.
	if r, ok := c.rate("k", CPUSample{1e9 + 9e8, t0.Add(2100 * time.Millisecond)}); !ok || r != 5e8 {
		t.Errorf("close reading: rate = %d %v, want the stored 5e8", r, ok)
	}
	c.sweep()
	c.sweep()
	if len(c.last) != 0 {
		t.Errorf("sweep kept %v", c.last)
	}
}

type fakeCRI struct {
	sandboxes  []*runtimeapi.PodSandboxStats
	containers []*runtimeapi.ContainerStats
	mount      string
	noSandbox  bool
	failed     bool // sandbox stats fail with Unknown
	calls      int  // ListPodSandboxStats calls
}

func (f *fakeCRI) ListPodSandboxStats(context.Context) ([]*runtimeapi.PodSandboxStats, error) {
	f.calls++
	if f.noSandbox {
		return nil, status.Error(codes.Unimplemented, "no")
	}
	if f.failed {
		return nil, status.Error(codes.Unknown, "cgroupPath is empty")
	}
	return f.sandboxes, nil
}
func (f *fakeCRI) ListContainerStats(context.Context) ([]*runtimeapi.ContainerStats, error) {
	return f.containers, nil
}
func (f *fakeCRI) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
		Timestamp: 1, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: f.mount},
		UsedBytes: &runtimeapi.UInt64Value{Value: 12345}, InodesUsed: &runtimeapi.UInt64Value{Value: 67}}}}, nil
}

var _ CRIStats = (*fakeCRI)(nil)

func u(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }

func ctrStats(id, name string, attempt uint32, cpu, ws, layer uint64, at time.Time) *runtimeapi.ContainerStats {
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: id, Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
			Labels: map[string]string{labelPodUID: "uid-1", labelPodName: "web", labelPodNamespace: "default", labelContainerName: name}},
		Cpu:           &runtimeapi.CpuUsage{Timestamp: at.UnixNano(), UsageCoreNanoSeconds: u(cpu)},
		Memory:        &runtimeapi.MemoryUsage{Timestamp: at.UnixNano(), WorkingSetBytes: u(ws), UsageBytes: u(ws + 10)},
		WritableLayer: &runtimeapi.FilesystemUsage{Timestamp: at.UnixNano(), UsedBytes: u(layer), InodesUsed: u(3)},
	}
}

func TestProviderSummary(t *testing.T) {
	root := t.TempDir()
	logs := t.TempDir()
	writeFiles(t, root, map[string]string{
		"pods/uid-1/volumes/kubernetes.io~empty-dir/scratch/data": string(make([]byte, 64<<10)),
	})
	writeFiles(t, logs, map[string]string{"default_web_uid-1/app/0.log": string(make([]byte, 8<<10))})
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	cri := &fakeCRI{mount: root}
	set := func(cpu uint64) {
		at := clk.Now()
		app := ctrStats("c2", "app", 1, cpu, 100<<20, 4096, at)
		old := ctrStats("c1", "app", 0, 5, 1, 1, at)
		cri.containers = []*runtimeapi.ContainerStats{old, app}
		cri.sandboxes = []*runtimeapi.PodSandboxStats{{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb1", Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-1"}},
			Linux: &runtimeapi.LinuxPodSandboxStats{
				Cpu:        &runtimeapi.CpuUsage{Timestamp: at.UnixNano(), UsageCoreNanoSeconds: u(cpu + 1e6)},
				Memory:     &runtimeapi.MemoryUsage{Timestamp: at.UnixNano(), WorkingSetBytes: u(110 << 20)},
				Process:    &runtimeapi.ProcessUsage{ProcessCount: u(4)},
				Containers: []*runtimeapi.ContainerStats{app},
			},
		}}
	}
	p, err := New(Config{NodeName: "n1", RootDir: root, PodLogsDir: logs, Runtime: cri, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	set(1e9)
	if _, err := p.Summary(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Second)
	set(2e9) // one more core-second in two seconds: half a core
	sum, err := p.Summary(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	n := sum.Node
	if n.NodeName != "n1" || n.CPU == nil || n.Memory == nil || *n.Memory.WorkingSetBytes == 0 || n.Fs == nil || n.Rlimit == nil {
		t.Fatalf("node = %+v", n)
	}
	if n.Runtime == nil || *n.Runtime.ImageFs.UsedBytes != 12345 || *n.Runtime.ImageFs.CapacityBytes == 0 {
		t.Errorf("imagefs = %+v", n.Runtime)
	}
	if len(sum.Pods) != 1 {
		t.Fatalf("pods = %+v", sum.Pods)
	}
	ps := sum.Pods[0]
	if ps.PodRef.Name != "web" || ps.PodRef.UID != "uid-1" || len(ps.Containers) != 1 {
		t.Fatalf("pod = %+v", ps)
	}
	c := ps.Containers[0]
	if c.CPU.UsageNanoCores == nil || *c.CPU.UsageNanoCores != 5e8 {
		t.Errorf("container nanocores = %v", c.CPU.UsageNanoCores)
	}
	if ps.CPU.UsageNanoCores == nil || *ps.CPU.UsageNanoCores != 5e8 || *ps.Memory.WorkingSetBytes != 110<<20 {
		t.Errorf("pod cpu %v memory %v", ps.CPU.UsageNanoCores, ps.Memory.WorkingSetBytes)
	}
	if ps.ProcessStats == nil || *ps.ProcessStats.ProcessCount != 4 {
		t.Errorf("process stats = %+v", ps.ProcessStats)
	}
	if c.Rootfs == nil || *c.Rootfs.UsedBytes != 4096 || c.Logs == nil || *c.Logs.UsedBytes < 8<<10 {
		t.Errorf("rootfs %+v logs %+v", c.Rootfs, c.Logs)
	}
	if len(ps.VolumeStats) != 1 || ps.VolumeStats[0].Name != "scratch" || *ps.VolumeStats[0].UsedBytes < 64<<10 {
		t.Fatalf("volumes = %+v", ps.VolumeStats)
	}
	want := *c.Rootfs.UsedBytes + *c.Logs.UsedBytes + *ps.VolumeStats[0].UsedBytes
	if ps.EphemeralStorage == nil || *ps.EphemeralStorage.UsedBytes != want {
		t.Errorf("ephemeral storage = %v, want %d", ps.EphemeralStorage.UsedBytes, want)
	}

	only, err := p.Summary(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	if only.Node.Fs != nil || only.Pods[0].EphemeralStorage != nil || only.Pods[0].Containers[0].Rootfs != nil {
		t.Error("onlyCPUAndMemory read filesystems")
	}

	// The node's part alone asks the runtime for no pod's stats and keeps
	// the pods' CPU samples, so the next whole summary still has rates.
	calls := cri.calls
	node, err := p.NodeSummary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Pods) != 0 || node.Node.Fs == nil || node.Node.Memory == nil || node.Node.Rlimit == nil || node.Node.Runtime == nil {
		t.Errorf("node summary = %+v", node)
	}
	if cri.calls != calls {
		t.Errorf("NodeSummary listed sandbox stats")
	}
	clk.Step(2 * time.Second)
	set(3e9)
	sum, err = p.Summary(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	if c := sum.Pods[0].Containers[0]; c.CPU.UsageNanoCores == nil || *c.CPU.UsageNanoCores != 5e8 {
		t.Errorf("container nanocores after a node summary = %v", c.CPU.UsageNanoCores)
	}
}

func TestProviderWithoutSandboxStats(t *testing.T) {
	root := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	cri := &fakeCRI{mount: root, noSandbox: true, containers: []*runtimeapi.ContainerStats{
		ctrStats("a", "app", 0, 1e9, 10, 1, clk.Now()), ctrStats("b", "side", 0, 2e9, 20, 1, clk.Now())}}
	p, err := New(Config{RootDir: root, PodLogsDir: filepath.Join(root, "logs"), Runtime: cri, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := p.Summary(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Pods) != 1 || len(sum.Pods[0].Containers) != 2 {
		t.Fatalf("pods = %+v", sum.Pods)
	}
	ps := sum.Pods[0]
	if *ps.CPU.UsageCoreNanoSeconds != 3e9 || *ps.Memory.WorkingSetBytes != 30 {
		t.Errorf("pod sums: cpu %d memory %d", *ps.CPU.UsageCoreNanoSeconds, *ps.Memory.WorkingSetBytes)
	}
	if ded, err := p.HasDedicatedImageFs(t.Context()); err != nil || ded {
		t.Errorf("dedicated imagefs = %v, %v", ded, err)
	}
}

func TestProviderSandboxStatsBackoff(t *testing.T) {
	root := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	cri := &fakeCRI{mount: root, failed: true}
	p, err := New(Config{RootDir: root, PodLogsDir: root, Runtime: cri, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := p.Summary(t.Context(), true); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Minute)
	}
	if cri.calls != 1 {
		t.Errorf("sandbox stats asked %d times within the backoff, want 1", cri.calls)
	}
	clk.Step(5 * time.Minute)
	if _, err := p.Summary(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if cri.calls != 2 {
		t.Errorf("sandbox stats not retried after the backoff: %d calls", cri.calls)
	}
}
