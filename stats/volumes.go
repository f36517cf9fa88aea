package stats

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// PodSpecs lists the agent's pods, whose plugin volumes the provider
// measures; syncloop.PodStore satisfies it.
type PodSpecs interface {
	Pods() []*v1.Pod
}

// VolumeMeasurer measures the volumes of a plugin that answers for them
// itself: csi.Plugin (NodeGetVolumeStats) satisfies it. ok is false when
// the pod has no such volume set up or the plugin reports no stats for it
// (a CSI driver without GET_VOLUME_STATS); it may block on a driver.
type VolumeMeasurer interface {
	VolumeStats(ctx context.Context, podUID types.UID, name string) (fs *statsapi.FsStats, ok bool, err error)
}

// pluginVolumes are the latest plugin volume stats by pod, as upstream's
// volume stat calculators keep them: measured every volumeStatsAggPeriod
// and read by the Summary API and the kubelet_volume_stats_* collector.
type pluginVolumes struct {
	mu  sync.Mutex
	pod map[types.UID][]statsapi.VolumeStats
}

func (v *pluginVolumes) get(uid types.UID) []statsapi.VolumeStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.pod[uid])
}

func (v *pluginVolumes) all() []statsapi.VolumeStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []statsapi.VolumeStats
	for _, vs := range v.pod {
		out = append(out, vs...)
	}
	return out
}

// measuredByPlugin reports whether a volume is one the VolumeMeasurer
// answers for (the CSI plugin's sources); the provider measures emptyDirs
// itself.
func measuredByPlugin(vol *v1.Volume) bool {
	return vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil || vol.CSI != nil
}

// pvcRef is the claim a volume reads, as upstream's calculator names it:
// the persistentVolumeClaim's, or the generic ephemeral volume's POD-VOLUME.
func pvcRef(pod *v1.Pod, vol *v1.Volume) *statsapi.PVCReference {
	switch {
	case vol.PersistentVolumeClaim != nil:
		return &statsapi.PVCReference{Name: vol.PersistentVolumeClaim.ClaimName, Namespace: pod.Namespace}
	case vol.Ephemeral != nil:
		return &statsapi.PVCReference{Name: pod.Name + "-" + vol.Name, Namespace: pod.Namespace}
	}
	return nil
}

// MeasureVolumes is the step of the volume stats calculator: it measures
// every plugin volume (Config.Volumes) of every pod Config.Specs lists and
// keeps the result for Summary and the volume metrics; pods no longer
// listed, and volumes no longer set up, are forgotten. A volume that fails
// is left out (logged), as upstream. It blocks on the plugin's drivers.
// Without Config.Volumes or Config.Specs it does nothing.
func (p *Provider) MeasureVolumes(ctx context.Context) {
	if p.cfg.Volumes == nil || p.cfg.Specs == nil {
		return
	}
	logger := klog.FromContext(ctx)
	latest := map[types.UID][]statsapi.VolumeStats{}
	for _, pod := range p.cfg.Specs.Pods() {
		var vols []statsapi.VolumeStats
		for i := range pod.Spec.Volumes {
			vol := &pod.Spec.Volumes[i]
			if !measuredByPlugin(vol) {
				continue
			}
			fs, ok, err := p.cfg.Volumes.VolumeStats(ctx, pod.UID, vol.Name)
			if err != nil {
				logger.V(4).Info("Failed to calculate volume metrics", "pod", klog.KObj(pod), "podUID", pod.UID, "volumeName", vol.Name, "err", err)
				continue
			}
			if !ok {
				continue
			}
			vols = append(vols, statsapi.VolumeStats{Name: vol.Name, PVCRef: pvcRef(pod, vol), FsStats: *fs})
		}
		if len(vols) > 0 {
			slices.SortFunc(vols, func(a, b statsapi.VolumeStats) int { return cmp.Compare(a.Name, b.Name) })
			latest[pod.UID] = vols
		}
	}
	p.volumes.mu.Lock()
	p.volumes.pod = latest
	p.volumes.mu.Unlock()
}

// RunVolumeStats calls MeasureVolumes at once and then every
// Config.VolumeStatsPeriod until ctx ends; with the period negative
// (kubelet's volumeStatsAggPeriod 0) it measures nothing and only waits.
func (p *Provider) RunVolumeStats(ctx context.Context) error {
	if p.cfg.VolumeStatsPeriod < 0 {
		<-ctx.Done()
		return nil
	}
	t := p.cfg.Clock.NewTicker(p.cfg.VolumeStatsPeriod)
	defer t.Stop()
	for {
		p.MeasureVolumes(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// The kubelet_volume_stats_* series, as upstream's volume stats collector.
var volumeStatsDescs = struct {
	capacity, available, used, inodes, inodesFree, inodesUsed *prometheus.Desc
}{
	capacity:   volumeDesc("capacity_bytes", "Capacity in bytes of the volume"),
	available:  volumeDesc("available_bytes", "Number of available bytes in the volume"),
	used:       volumeDesc("used_bytes", "Number of used bytes in the volume"),
	inodes:     volumeDesc("inodes", "Maximum number of inodes in the volume"),
	inodesFree: volumeDesc("inodes_free", "Number of free inodes in the volume"),
	inodesUsed: volumeDesc("inodes_used", "Number of used inodes in the volume"),
}

func volumeDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("kubelet_volume_stats_"+name, "[ALPHA] "+help, []string{"namespace", "persistentvolumeclaim"}, nil)
}

// volumeCollector serves the latest plugin volume stats of PVC-backed
// volumes, one series set per claim (pods sharing a claim report it once).
type volumeCollector struct{ v *pluginVolumes }

// RegisterVolumeMetrics registers the kubelet_volume_stats_* gauges of the
// provider's PVC-backed volumes with reg. A scrape reads the latest
// measurement (MeasureVolumes); it never calls a driver.
func (p *Provider) RegisterVolumeMetrics(reg prometheus.Registerer) error {
	return reg.Register(volumeCollector{&p.volumes})
}

func (c volumeCollector) Describe(ch chan<- *prometheus.Desc) {
	d := volumeStatsDescs
	for _, desc := range []*prometheus.Desc{d.capacity, d.available, d.used, d.inodes, d.inodesFree, d.inodesUsed} {
		ch <- desc
	}
}

func (c volumeCollector) Collect(ch chan<- prometheus.Metric) {
	d := volumeStatsDescs
	seen := map[statsapi.PVCReference]bool{}
	for _, vs := range c.v.all() {
		if vs.PVCRef == nil || seen[*vs.PVCRef] {
			continue
		}
		seen[*vs.PVCRef] = true
		for desc, val := range map[*prometheus.Desc]*uint64{d.capacity: vs.CapacityBytes, d.available: vs.AvailableBytes,
			d.used: vs.UsedBytes, d.inodes: vs.Inodes, d.inodesFree: vs.InodesFree, d.inodesUsed: vs.InodesUsed} {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(deref(val)), vs.PVCRef.Namespace, vs.PVCRef.Name)
		}
	}
}
