package stats

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/internal/poddir"
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

// measuredVolumes are the latest volume stats by pod, as upstream's
// volume stat calculators keep them: measured every volumeStatsAggPeriod
// and read by the Summary API and the kubelet_volume_stats_* collector.
type measuredVolumes struct {
	mu  sync.Mutex
	pod map[types.UID]podVolumes
}

// podVolumes is one pod's measurement: every volume, and the part of them
// that counts as the pod's local ephemeral storage.
type podVolumes struct {
	all       []statsapi.VolumeStats
	ephemeral []statsapi.VolumeStats
}

func (v *measuredVolumes) get(uid types.UID) podVolumes {
	v.mu.Lock()
	defer v.mu.Unlock()
	pv := v.pod[uid]
	return podVolumes{all: slices.Clone(pv.all), ephemeral: slices.Clone(pv.ephemeral)}
}

func (v *measuredVolumes) all() []statsapi.VolumeStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []statsapi.VolumeStats
	for _, pv := range v.pod {
		out = append(out, pv.all...)
	}
	return out
}

// measuredByPlugin reports whether a volume is one the VolumeMeasurer
// answers for (the CSI plugin's sources).
func measuredByPlugin(vol *v1.Volume) bool {
	return vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil || vol.CSI != nil
}

// localPluginDir is the directory, under RootDir/pods/UID/volumes, of a
// volume the provider measures itself by walking it, as upstream's
// emptyDir, configMap, secret, downwardAPI and projected plugins measure
// theirs; "" for any other volume (hostPath, image volumes: no stats, as
// upstream).
func localPluginDir(vol *v1.Volume) string {
	switch {
	case vol.EmptyDir != nil:
		return "kubernetes.io~empty-dir"
	case vol.ConfigMap != nil:
		return "kubernetes.io~configmap"
	case vol.Secret != nil:
		return "kubernetes.io~secret"
	case vol.DownwardAPI != nil:
		return "kubernetes.io~downward-api"
	case vol.Projected != nil:
		return "kubernetes.io~projected"
	}
	return ""
}

// localEphemeral reports whether a volume's use counts as the pod's local
// ephemeral storage, as upstream decides it: a disk-backed emptyDir, a
// configMap or a gitRepo volume.
func localEphemeral(vol *v1.Volume) bool {
	return vol.GitRepo != nil || vol.ConfigMap != nil ||
		(vol.EmptyDir != nil && vol.EmptyDir.Medium == v1.StorageMediumDefault)
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
// every volume of every pod Config.Specs lists — the local ones (emptyDir,
// configMap, secret, downwardAPI, projected) by walking their directory,
// the plugin ones through Config.Volumes — and keeps the result for
// Summary and the volume metrics; pods no longer listed, and volumes no
// longer set up, are forgotten. A volume that fails is left out (logged),
// as upstream. It blocks on the plugin's drivers. Without Config.Specs it
// does nothing.
func (p *Provider) MeasureVolumes(ctx context.Context) {
	if p.cfg.Specs == nil {
		return
	}
	latest := map[types.UID]podVolumes{}
	for _, pod := range p.cfg.Specs.Pods() {
		var pv podVolumes
		for i := range pod.Spec.Volumes {
			vol := &pod.Spec.Volumes[i]
			vs, ok := p.measureVolume(ctx, pod, vol)
			if !ok {
				continue
			}
			pv.all = append(pv.all, vs)
			if localEphemeral(vol) {
				pv.ephemeral = append(pv.ephemeral, vs)
			}
		}
		if len(pv.all) > 0 {
			slices.SortFunc(pv.all, func(a, b statsapi.VolumeStats) int { return cmp.Compare(a.Name, b.Name) })
			latest[pod.UID] = pv
		}
	}
	p.volumes.mu.Lock()
	p.volumes.pod = latest
	p.volumes.mu.Unlock()
}

// measureVolume measures one volume of pod; ok is false when it is not set
// up, has no stats or failed (logged at V(4), as upstream).
func (p *Provider) measureVolume(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (statsapi.VolumeStats, bool) {
	logger := klog.FromContext(ctx)
	if dir := localPluginDir(vol); dir != "" {
		st, err := measureDir(poddir.Volume(p.cfg.RootDir, pod.UID, dir, vol.Name), p.cfg.Clock.Now())
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				logger.V(4).Info("Failed to calculate volume metrics", "pod", klog.KObj(pod), "podUID", pod.UID, "volumeName", vol.Name, "err", err)
			}
			return statsapi.VolumeStats{}, false
		}
		return statsapi.VolumeStats{Name: vol.Name, FsStats: *st}, true
	}
	if !measuredByPlugin(vol) || p.cfg.Volumes == nil {
		return statsapi.VolumeStats{}, false
	}
	fs, ok, err := p.cfg.Volumes.VolumeStats(ctx, pod.UID, vol.Name)
	if err != nil {
		logger.V(4).Info("Failed to calculate volume metrics", "pod", klog.KObj(pod), "podUID", pod.UID, "volumeName", vol.Name, "err", err)
		return statsapi.VolumeStats{}, false
	}
	if !ok {
		return statsapi.VolumeStats{}, false
	}
	return statsapi.VolumeStats{Name: vol.Name, PVCRef: pvcRef(pod, vol), FsStats: *fs}, true
}

// measureDir is what upstream's du-based volume metrics report: the
// directory's use (a walk) and its filesystem's capacity, free space and
// inodes.
func measureDir(path string, now time.Time) (*statsapi.FsStats, error) {
	if _, err := os.Lstat(path); err != nil {
		return nil, err
	}
	use, err := Du(path)
	if err != nil {
		return nil, err
	}
	fsu, err := Statfs(path)
	if err != nil {
		return nil, err
	}
	return &statsapi.FsStats{Time: metav1.NewTime(now), UsedBytes: ptrTo(use.Bytes), InodesUsed: ptrTo(use.Inodes),
		CapacityBytes: ptrTo(fsu.Capacity), AvailableBytes: ptrTo(fsu.Available),
		Inodes: ptrTo(fsu.Inodes), InodesFree: ptrTo(fsu.InodesFree)}, nil
}

// RunVolumeStats calls MeasureVolumes at once and then every
// Config.VolumeStatsPeriod until ctx ends; with the period negative
// (kubelet's volumeStatsAggPeriod 0) it measures nothing and only waits,
// and the Summary reports no volumes, as upstream.
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
type volumeCollector struct{ v *measuredVolumes }

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
