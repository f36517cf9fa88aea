package stats

import (
	"cmp"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Labels the agent puts on sandboxes and containers (as upstream).
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
)

// podRaw gathers what the runtime reported for one pod.
type podRaw struct {
	ref        statsapi.PodReference
	sandboxID  string
	linux      *runtimeapi.LinuxPodSandboxStats // nil without sandbox stats
	containers map[string]*runtimeapi.ContainerStats
}

// groupByPod collects sandbox and container stats by pod UID. Sandbox
// stats win for pod-level numbers; of several sandboxes of one pod the
// one reporting CPU is kept. Of several instances of one container the
// highest attempt is kept. Containers without pod labels are ignored.
func groupByPod(sandboxes []*runtimeapi.PodSandboxStats, containers []*runtimeapi.ContainerStats) map[string]*podRaw {
	pods := map[string]*podRaw{}
	addContainer := func(p *podRaw, c *runtimeapi.ContainerStats) {
		name := c.GetAttributes().GetMetadata().GetName()
		if name == "" {
			name = c.GetAttributes().GetLabels()[labelContainerName]
		}
		if name == "" {
			return
		}
		if old, ok := p.containers[name]; ok && old.GetAttributes().GetMetadata().GetAttempt() > c.GetAttributes().GetMetadata().GetAttempt() {
			return
		}
		p.containers[name] = c
	}
	for _, sb := range sandboxes {
		md := sb.GetAttributes().GetMetadata()
		uid := md.GetUid()
		if uid == "" {
			continue
		}
		p, ok := pods[uid]
		if ok && p.linux.GetCpu() != nil && sb.GetLinux().GetCpu() == nil {
			continue
		}
		p = &podRaw{ref: statsapi.PodReference{Name: md.GetName(), Namespace: md.GetNamespace(), UID: uid},
			sandboxID: sb.GetAttributes().GetId(), linux: sb.GetLinux(), containers: map[string]*runtimeapi.ContainerStats{}}
		pods[uid] = p
		for _, c := range sb.GetLinux().GetContainers() {
			addContainer(p, c)
		}
	}
	for _, c := range containers {
		l := c.GetAttributes().GetLabels()
		uid := l[labelPodUID]
		if uid == "" {
			continue
		}
		p, ok := pods[uid]
		if !ok {
			p = &podRaw{ref: statsapi.PodReference{Name: l[labelPodName], Namespace: l[labelPodNamespace], UID: uid},
				containers: map[string]*runtimeapi.ContainerStats{}}
			pods[uid] = p
		}
		addContainer(p, c)
	}
	return pods
}

func u64v(v *runtimeapi.UInt64Value) *uint64 {
	if v == nil {
		return nil
	}
	x := v.Value
	return &x
}

func nsTime(ns int64, fallback time.Time) metav1.Time {
	if ns == 0 {
		return metav1.NewTime(fallback)
	}
	return metav1.NewTime(time.Unix(0, ns))
}

func ptrTo[T any](v T) *T { return &v }

// cpuStats converts CRI CPU usage; rate computes nanocores when the
// runtime did not.
func cpuStats(c *runtimeapi.CpuUsage, now time.Time, rate func(CPUSample) (uint64, bool)) *statsapi.CPUStats {
	if c == nil {
		return nil
	}
	out := &statsapi.CPUStats{Time: nsTime(c.Timestamp, now), UsageCoreNanoSeconds: u64v(c.UsageCoreNanoSeconds),
		PSI: criPSI(c.Psi)}
	if out.UsageCoreNanoSeconds != nil {
		if r, ok := rate(CPUSample{UsageCoreNanoSeconds: *out.UsageCoreNanoSeconds, At: out.Time.Time}); ok {
			out.UsageNanoCores = &r
		}
	}
	if c.UsageNanoCores != nil && c.UsageNanoCores.Value > 0 {
		out.UsageNanoCores = u64v(c.UsageNanoCores)
	}
	return out
}

func memoryStats(m *runtimeapi.MemoryUsage, now time.Time) *statsapi.MemoryStats {
	if m == nil {
		return nil
	}
	return &statsapi.MemoryStats{Time: nsTime(m.Timestamp, now), WorkingSetBytes: u64v(m.WorkingSetBytes),
		UsageBytes: u64v(m.UsageBytes), RSSBytes: u64v(m.RssBytes), AvailableBytes: u64v(m.AvailableBytes),
		PageFaults: u64v(m.PageFaults), MajorPageFaults: u64v(m.MajorPageFaults), PSI: criPSI(m.Psi)}
}

// criPSI converts the PSI a runtime may report (containerd 2 on cgroup
// v2); the cgroup's own pressure files, when found, replace it.
func criPSI(s *runtimeapi.PsiStats) *statsapi.PSIStats {
	if s == nil {
		return nil
	}
	data := func(d *runtimeapi.PsiData) statsapi.PSIData {
		return statsapi.PSIData{Total: d.GetTotal(), Avg10: d.GetAvg10(), Avg60: d.GetAvg60(), Avg300: d.GetAvg300()}
	}
	return &statsapi.PSIStats{Some: data(s.Some), Full: data(s.Full)}
}

// containerIO is a container's IO block as upstream's CRI stats provider
// makes it: always there, with the runtime's PSI if it reports one.
func containerIO(c *runtimeapi.IoUsage, now time.Time) *statsapi.IOStats {
	return &statsapi.IOStats{Time: nsTime(c.GetTimestamp(), now), PSI: criPSI(c.GetPsi())}
}

func addU64(a, b *uint64) *uint64 {
	if a == nil && b == nil {
		return nil
	}
	var s uint64
	if a != nil {
		s += *a
	}
	if b != nil {
		s += *b
	}
	return &s
}

// sumContainers is the pod CPU and memory when the runtime gave no
// sandbox-level numbers.
func sumContainers(cs []statsapi.ContainerStats, now time.Time) (*statsapi.CPUStats, *statsapi.MemoryStats) {
	cpu := &statsapi.CPUStats{Time: metav1.NewTime(now)}
	mem := &statsapi.MemoryStats{Time: metav1.NewTime(now)}
	for _, c := range cs {
		if c.CPU != nil {
			cpu.UsageCoreNanoSeconds = addU64(cpu.UsageCoreNanoSeconds, c.CPU.UsageCoreNanoSeconds)
			cpu.UsageNanoCores = addU64(cpu.UsageNanoCores, c.CPU.UsageNanoCores)
		}
		if c.Memory != nil {
			mem.WorkingSetBytes = addU64(mem.WorkingSetBytes, c.Memory.WorkingSetBytes)
			mem.UsageBytes = addU64(mem.UsageBytes, c.Memory.UsageBytes)
			mem.RSSBytes = addU64(mem.RSSBytes, c.Memory.RSSBytes)
		}
	}
	return cpu, mem
}

func networkStats(n *runtimeapi.NetworkUsage, now time.Time) *statsapi.NetworkStats {
	if n == nil || n.DefaultInterface == nil {
		return nil
	}
	iface := func(i *runtimeapi.NetworkInterfaceUsage) statsapi.InterfaceStats {
		return statsapi.InterfaceStats{Name: i.Name, RxBytes: u64v(i.RxBytes), RxErrors: u64v(i.RxErrors),
			TxBytes: u64v(i.TxBytes), TxErrors: u64v(i.TxErrors)}
	}
	out := &statsapi.NetworkStats{Time: nsTime(n.Timestamp, now), InterfaceStats: iface(n.DefaultInterface)}
	for _, i := range n.Interfaces {
		out.Interfaces = append(out.Interfaces, iface(i))
	}
	return out
}

// podLogDir is PodLogsDir/NAMESPACE_NAME_UID, as upstream.
func podLogDir(logsDir string, ref statsapi.PodReference) string {
	return filepath.Join(logsDir, ref.Namespace+"_"+ref.Name+"_"+ref.UID)
}

func sortPods(pods []statsapi.PodStats) {
	slices.SortFunc(pods, func(a, b statsapi.PodStats) int {
		return cmp.Or(cmp.Compare(a.PodRef.Namespace, b.PodRef.Namespace), cmp.Compare(a.PodRef.Name, b.PodRef.Name),
			cmp.Compare(a.PodRef.UID, b.PodRef.UID))
	})
}
