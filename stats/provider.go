package stats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/poddir"
)

// CRIStats is what the provider needs of the container runtime;
// criruntime.Runtime satisfies it.
type CRIStats interface {
	// ListPodSandboxStats may fail with codes.Unimplemented; the provider
	// then works from container stats alone.
	ListPodSandboxStats(ctx context.Context) ([]*runtimeapi.PodSandboxStats, error)
	ListContainerStats(ctx context.Context) ([]*runtimeapi.ContainerStats, error)
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// PodLister gives container and pod start times; criruntime.Runtime
// satisfies it.
type PodLister interface {
	ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error)
}

// Config configures a Provider. Runtime is required.
type Config struct {
	// NodeName is reported in Summary.Node.
	NodeName string
	// RootDir is the agent's root directory (/var/lib/kubelet): nodefs is
	// the filesystem holding it; emptyDirs live under pods/UID/volumes.
	RootDir string
	// PodLogsDir holds container logs. Default /var/log/pods.
	PodLogsDir string
	// Machine reads the kernel; the zero value reads this machine.
	Machine Machine
	Runtime CRIStats
	// Pods, if set, supplies start times.
	Pods PodLister
	// DiskUsagePeriod is how long a directory walk (emptyDir, logs) is
	// reused. Default 10s.
	DiskUsagePeriod time.Duration
	// MinCPUSampleInterval: readings closer than this to the previous one
	// reuse its rate. Default 1s.
	MinCPUSampleInterval time.Duration
	// Specs lists the pods whose volumes MeasureVolumes measures every
	// VolumeStatsPeriod, as upstream's volume stat calculators: the local
	// ones (emptyDir, configMap, secret, downwardAPI, projected) by a walk
	// of their directory, the plugin ones (persistentVolumeClaim,
	// ephemeral, csi) through Volumes (csi.Plugin), reported with their
	// pvcRef. The Summary then reports only what was measured. Without
	// Specs (a library user with no pod list) the Summary walks the
	// emptyDirs it finds under RootDir on demand (DiskUsagePeriod) and
	// reports no other volume.
	Specs   PodSpecs
	Volumes VolumeMeasurer
	// VolumeStatsPeriod is how often RunVolumeStats measures the volumes
	// (kubelet's volumeStatsAggPeriod). Zero means one minute; negative:
	// never (kubelet's volumeStatsAggPeriod 0).
	VolumeStatsPeriod time.Duration
	// PodCgroups, if set, locates pod cgroups: the Summary then reports
	// the pressure (PSI) of pods and of their containers (the child
	// cgroups named by the container IDs), as kubelet. Without it only
	// the node's (the root cgroup's) and what the runtime reports are.
	PodCgroups PodCgroups
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// Provider assembles the Summary API from the machine and the runtime.
// It implements server.StatsProvider, eviction.SummaryProvider and
// gc.ImageFsStats. Safe for concurrent use.
type Provider struct {
	cfg     Config
	du      *duCache
	rate    *cpuRates
	volumes measuredVolumes

	mu sync.Mutex
	// sandboxStatsRetry: after ListPodSandboxStats failed, the provider
	// works from container stats alone until then (a runtime without pod
	// cgroups fails every call; no point asking every few seconds).
	sandboxStatsRetry time.Time
}

// sandboxStatsBackoff is how long the provider does without sandbox stats
// after they failed.
const sandboxStatsBackoff = 5 * time.Minute

// New returns a Provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("stats: Config.Runtime must be set")
	}
	if cfg.RootDir == "" {
		return nil, errors.New("stats: Config.RootDir must be set")
	}
	if cfg.PodLogsDir == "" {
		cfg.PodLogsDir = "/var/log/pods"
	}
	if cfg.DiskUsagePeriod == 0 {
		cfg.DiskUsagePeriod = 10 * time.Second
	}
	if cfg.MinCPUSampleInterval == 0 {
		cfg.MinCPUSampleInterval = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.VolumeStatsPeriod == 0 {
		cfg.VolumeStatsPeriod = time.Minute
	}
	return &Provider{cfg: cfg, du: &duCache{clock: cfg.Clock, period: cfg.DiskUsagePeriod},
		rate: &cpuRates{minInterval: cfg.MinCPUSampleInterval}}, nil
}

// Summary implements server.StatsProvider: node CPU, memory, PIDs and
// filesystems, and every pod the runtime reports, with its containers,
// volumes and ephemeral storage. With onlyCPUAndMemory it reads no
// filesystems. It blocks on the runtime and the machine; the result is
// the caller's.
func (p *Provider) Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error) {
	defer p.rate.sweep()
	node, err := p.nodeStats(ctx, onlyCPUAndMemory)
	if err != nil {
		return nil, err
	}
	pods, err := p.podStats(ctx, onlyCPUAndMemory, node)
	if err != nil {
		return nil, err
	}
	p.du.prune()
	return &statsapi.Summary{Node: *node, Pods: pods}, nil
}

// NodeSummary is Summary without the pods: the node's CPU, memory, PIDs
// and filesystems (what eviction.NodeSummaryProvider asks for). It asks
// the runtime for no pod's stats and leaves what the provider keeps per
// pod (CPU samples for rates, disk-usage results) as it was.
func (p *Provider) NodeSummary(ctx context.Context) (*statsapi.Summary, error) {
	node, err := p.nodeStats(ctx, false)
	if err != nil {
		return nil, err
	}
	return &statsapi.Summary{Node: *node}, nil
}

func (p *Provider) nodeStats(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.NodeStats, error) {
	now := metav1.NewTime(p.cfg.Clock.Now())
	m := p.cfg.Machine
	n := &statsapi.NodeStats{NodeName: p.cfg.NodeName}
	if bt, err := m.BootTime(); err == nil {
		n.StartTime = metav1.NewTime(time.Unix(bt, 0))
	}
	cpu, err := m.CPUUsage()
	if err != nil {
		return nil, err
	}
	n.CPU = &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: ptrTo(cpu)}
	if r, ok := p.rate.rate("node", CPUSample{UsageCoreNanoSeconds: cpu, At: now.Time}); ok {
		n.CPU.UsageNanoCores = &r
	}
	mem, err := m.Memory()
	if err != nil {
		return nil, err
	}
	n.Memory = &statsapi.MemoryStats{Time: now, AvailableBytes: ptrTo(mem.Available), UsageBytes: ptrTo(mem.Usage),
		WorkingSetBytes: ptrTo(mem.WorkingSet), RSSBytes: ptrTo(mem.RSS), PageFaults: ptrTo(mem.PageFaults),
		MajorPageFaults: ptrTo(mem.MajorPageFaults)}
	pr, _ := p.pressure(ctx, "/")
	attachPressure(pr, n.CPU, n.Memory)
	if onlyCPUAndMemory {
		return n, nil
	}
	n.IO = ioStats(pr, now.Time)
	if maxPID, running, err := m.PIDs(); err == nil {
		n.Rlimit = &statsapi.RlimitStats{Time: now, MaxPID: &maxPID, NumOfRunningProcesses: &running}
	} else {
		klog.FromContext(ctx).V(2).Info("Unable to read PID stats", "err", err)
	}
	root, err := Statfs(p.cfg.RootDir)
	if err != nil {
		return nil, err
	}
	n.Fs = fsStats(root, now)
	img, err := p.ImageFs(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Unable to read image filesystem stats")
	} else {
		n.Runtime = &statsapi.RuntimeStats{ImageFs: img}
	}
	return n, nil
}

func fsStats(u FsUsage, now metav1.Time) *statsapi.FsStats {
	return &statsapi.FsStats{Time: now, CapacityBytes: ptrTo(u.Capacity), AvailableBytes: ptrTo(u.Available),
		UsedBytes: ptrTo(u.Used), Inodes: ptrTo(u.Inodes), InodesFree: ptrTo(u.InodesFree),
		InodesUsed: ptrTo(sub(u.Inodes, u.InodesFree))}
}

// imageFsMount returns the runtime's image filesystem and its mountpoint.
func (p *Provider) imageFsMount(ctx context.Context) (*runtimeapi.FilesystemUsage, string, error) {
	resp, err := p.cfg.Runtime.ImageFsInfo(ctx)
	if err != nil {
		return nil, "", err
	}
	fss := resp.GetImageFilesystems()
	if len(fss) == 0 {
		return nil, "", errors.New("stats: the runtime reports no image filesystem")
	}
	return fss[0], fss[0].GetFsId().GetMountpoint(), nil
}

// ImageFs reports the image filesystem: capacity, available and inodes
// from statfs of the runtime's image mountpoint, used bytes and inodes as
// the runtime counts them. It implements gc.ImageFsStats.
func (p *Provider) ImageFs(ctx context.Context) (*statsapi.FsStats, error) {
	fs, mount, err := p.imageFsMount(ctx)
	if err != nil {
		return nil, err
	}
	u, err := Statfs(mount)
	if err != nil {
		return nil, err
	}
	out := fsStats(u, nsTime(fs.GetTimestamp(), p.cfg.Clock.Now()))
	if v := fs.GetUsedBytes(); v != nil {
		out.UsedBytes = ptrTo(v.Value)
	}
	if v := fs.GetInodesUsed(); v != nil {
		out.InodesUsed = ptrTo(v.Value)
	}
	return out, nil
}

// HasDedicatedImageFs reports whether images live on another filesystem
// than RootDir (feed eviction.Config.DedicatedImageFs).
func (p *Provider) HasDedicatedImageFs(ctx context.Context) (bool, error) {
	_, mount, err := p.imageFsMount(ctx)
	if err != nil {
		return false, err
	}
	img, err := Statfs(mount)
	if err != nil {
		return false, err
	}
	root, err := Statfs(p.cfg.RootDir)
	if err != nil {
		return false, err
	}
	return img.Device != root.Device, nil
}

func (p *Provider) podStats(ctx context.Context, onlyCPUAndMemory bool, node *statsapi.NodeStats) ([]statsapi.PodStats, error) {
	logger := klog.FromContext(ctx)
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	trySandboxes := !now.Before(p.sandboxStatsRetry)
	p.mu.Unlock()
	var sandboxes []*runtimeapi.PodSandboxStats
	if trySandboxes {
		var err error
		sandboxes, err = p.cfg.Runtime.ListPodSandboxStats(ctx)
		if err != nil {
			if status.Code(err) != codes.Unimplemented {
				logger.V(2).Info("Pod sandbox stats unavailable; using container stats", "err", err, "retryAfter", sandboxStatsBackoff)
			}
			p.mu.Lock()
			p.sandboxStatsRetry = now.Add(sandboxStatsBackoff)
			p.mu.Unlock()
			sandboxes = nil
		}
	}
	containers, err := p.cfg.Runtime.ListContainerStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	started := map[string]time.Time{}
	podStarted := map[string]time.Time{}
	if p.cfg.Pods != nil {
		if pods, err := p.cfg.Pods.ListPods(ctx, true); err == nil {
			for _, pod := range pods {
				podStarted[string(pod.ID)] = pod.CreatedAt
				for _, c := range pod.Containers {
					started[c.ID.ID] = c.CreatedAt
				}
			}
		}
	}
	var imgFs *statsapi.FsStats
	if node.Runtime != nil {
		imgFs = node.Runtime.ImageFs
	}
	var out []statsapi.PodStats
	for uid, raw := range groupByPod(sandboxes, containers) {
		ps := statsapi.PodStats{PodRef: raw.ref, StartTime: metav1.NewTime(podStarted[uid])}
		names := make([]string, 0, len(raw.containers))
		for n := range raw.containers {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, name := range names {
			c := raw.containers[name]
			id := c.GetAttributes().GetId()
			cs := statsapi.ContainerStats{Name: name, StartTime: metav1.NewTime(started[id]),
				CPU:    cpuStats(c.GetCpu(), now, func(s CPUSample) (uint64, bool) { return p.rate.rate("c/"+id, s) }),
				Memory: memoryStats(c.GetMemory(), now)}
			if !onlyCPUAndMemory {
				p.containerFs(ctx, &cs, c, raw.ref, node.Fs, imgFs, now)
			}
			ps.Containers = append(ps.Containers, cs)
		}
		if l := raw.linux; l != nil && l.Cpu != nil {
			ps.CPU = cpuStats(l.Cpu, now, func(s CPUSample) (uint64, bool) { return p.rate.rate("p/"+raw.sandboxID, s) })
			ps.Memory = memoryStats(l.Memory, now)
		} else {
			ps.CPU, ps.Memory = sumContainers(ps.Containers, now)
		}
		if l := raw.linux; l != nil {
			ps.Network = networkStats(l.Network, now)
			if l.Process != nil {
				ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: u64v(l.Process.ProcessCount)}
			}
		}
		p.podPressure(ctx, &ps, raw, !onlyCPUAndMemory, now)
		if !onlyCPUAndMemory {
			p.podStorage(ctx, &ps, node.Fs, now)
		}
		out = append(out, ps)
	}
	sortPods(out)
	return out, nil
}

// containerFs fills Rootfs (writable layer, as the runtime counts it, on
// the image filesystem) and Logs (the container's log directory on nodefs).
func (p *Provider) containerFs(ctx context.Context, cs *statsapi.ContainerStats, c *runtimeapi.ContainerStats, ref statsapi.PodReference, nodeFs, imgFs *statsapi.FsStats, now time.Time) {
	if wl := c.GetWritableLayer(); wl != nil {
		cs.Rootfs = &statsapi.FsStats{Time: nsTime(wl.Timestamp, now), UsedBytes: u64v(wl.UsedBytes), InodesUsed: u64v(wl.InodesUsed)}
		if imgFs != nil {
			cs.Rootfs.CapacityBytes, cs.Rootfs.AvailableBytes = imgFs.CapacityBytes, imgFs.AvailableBytes
			cs.Rootfs.Inodes, cs.Rootfs.InodesFree = imgFs.Inodes, imgFs.InodesFree
		}
	}
	use, err := p.du.get(filepath.Join(podLogDir(p.cfg.PodLogsDir, ref), cs.Name))
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Unable to measure container logs", "pod", ref.Namespace+"/"+ref.Name, "container", cs.Name, "err", err)
		return
	}
	cs.Logs = &statsapi.FsStats{Time: metav1.NewTime(now), UsedBytes: ptrTo(use.Bytes), InodesUsed: ptrTo(use.Inodes)}
	if nodeFs != nil {
		cs.Logs.CapacityBytes, cs.Logs.AvailableBytes = nodeFs.CapacityBytes, nodeFs.AvailableBytes
		cs.Logs.Inodes, cs.Logs.InodesFree = nodeFs.Inodes, nodeFs.InodesFree
	}
}

// tmpfsMagic is TMPFS_MAGIC: a memory-backed emptyDir.
const tmpfsMagic = 0x01021994

// podStorage fills VolumeStats and EphemeralStorage (writable layers,
// logs and the local ephemeral volumes, as upstream counts a pod's local
// ephemeral storage). With Config.Specs the volumes are those
// MeasureVolumes last measured; without, the emptyDirs found under
// RootDir/pods/UID/volumes/kubernetes.io~empty-dir, walked now.
func (p *Provider) podStorage(ctx context.Context, ps *statsapi.PodStats, nodeFs *statsapi.FsStats, now time.Time) {
	var pv podVolumes
	if p.cfg.Specs != nil {
		pv = p.volumes.get(types.UID(ps.PodRef.UID))
	} else {
		pv = p.walkEmptyDirs(ctx, ps.PodRef.UID, nodeFs, now)
	}
	ps.VolumeStats = append(ps.VolumeStats, pv.all...)
	var bytes, inodes uint64
	for _, v := range pv.ephemeral {
		bytes += deref(v.UsedBytes)
		inodes += deref(v.InodesUsed)
	}
	for _, c := range ps.Containers {
		for _, f := range []*statsapi.FsStats{c.Rootfs, c.Logs} {
			if f != nil {
				bytes += deref(f.UsedBytes)
				inodes += deref(f.InodesUsed)
			}
		}
	}
	ps.EphemeralStorage = &statsapi.FsStats{Time: metav1.NewTime(now), UsedBytes: ptrTo(bytes), InodesUsed: ptrTo(inodes)}
	if nodeFs != nil {
		ps.EphemeralStorage.CapacityBytes, ps.EphemeralStorage.AvailableBytes = nodeFs.CapacityBytes, nodeFs.AvailableBytes
		ps.EphemeralStorage.Inodes, ps.EphemeralStorage.InodesFree = nodeFs.Inodes, nodeFs.InodesFree
	}
	slices.SortFunc(ps.VolumeStats, func(a, b statsapi.VolumeStats) int { return cmp.Compare(a.Name, b.Name) })
}

// walkEmptyDirs measures a pod's emptyDirs found on disk (through the du
// cache), for a provider without Config.Specs; the disk-backed ones are
// its local ephemeral storage.
func (p *Provider) walkEmptyDirs(ctx context.Context, uid string, nodeFs *statsapi.FsStats, now time.Time) podVolumes {
	dir := filepath.Join(poddir.Volumes(p.cfg.RootDir, types.UID(uid)), "kubernetes.io~empty-dir")
	entries, _ := os.ReadDir(dir)
	var pv podVolumes
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		use, err := p.du.get(path)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Unable to measure volume", "path", path, "err", err)
			continue
		}
		vs := statsapi.VolumeStats{Name: e.Name(), FsStats: statsapi.FsStats{Time: metav1.NewTime(now),
			UsedBytes: ptrTo(use.Bytes), InodesUsed: ptrTo(use.Inodes)}}
		var sfs syscall.Statfs_t
		memory := syscall.Statfs(path, &sfs) == nil && sfs.Type == tmpfsMagic
		if memory {
			u, err := Statfs(path)
			if err == nil {
				vs.CapacityBytes, vs.AvailableBytes = ptrTo(u.Capacity), ptrTo(u.Available)
			}
		} else if nodeFs != nil {
			vs.CapacityBytes, vs.AvailableBytes, vs.Inodes, vs.InodesFree = nodeFs.CapacityBytes, nodeFs.AvailableBytes, nodeFs.Inodes, nodeFs.InodesFree
		}
		pv.all = append(pv.all, vs)
		if !memory {
			pv.ephemeral = append(pv.ephemeral, vs)
		}
	}
	return pv
}

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}
