package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/volumemgr"
)

// VolumeStats asks the driver of pod podUID's CSI volume name for its
// usage (NodeGetVolumeStats on the published path), as upstream's CSI
// metrics provider. ok is false, with no error, when the pod has no
// published CSI volume of that name or its driver does not advertise
// GET_VOLUME_STATS (upstream's "not supported": the volume has no stats).
// A driver that is not registered (restarting) is an error, as are failed
// calls. It blocks on the driver, for at most the plugin's Timeout; the
// result is the caller's. The stats carry no volume condition: CSI v1.13
// has none in NodeGetVolumeStats.
func (p *Plugin) VolumeStats(ctx context.Context, podUID types.UID, name string) (_ *statsapi.FsStats, ok bool, _ error) {
	dir := p.volumeDir(podUID, name) // a claim's is named by its PV (dirs.go)
	data, err := readVolData(dir)
	spec := ""
	if errors.Is(err, fs.ErrNotExist) {
		if spec = p.blockSpec(podUID, name); spec == "" {
			return nil, false, nil
		}
		data, err = readVolData(p.blockDataDir(spec))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
	}
	if err != nil {
		return nil, false, err
	}
	if data[keyMode] == string(v1.PersistentVolumeBlock) { // the layout before upstream's
		spec = data[keySpecName]
	}
	// A raw block volume is measured at its published device file, as
	// upstream's block mapper's metrics provider.
	target := filepath.Join(dir, "mount")
	if spec != "" {
		target = p.blockPublishPath(spec, podUID)
	}
	driver, handle := data[keyDriver], data[keyHandle]
	endpoint, err := p.cfg.Drivers.endpoint(driver)
	if err != nil {
		return nil, false, err
	}
	c, err := dial(endpoint, driver, p.cfg.Metrics)
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	supported, err := c.hasCapability(ctx, csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS)
	if err != nil {
		return nil, false, err
	}
	if !supported {
		return nil, false, nil
	}
	now := metav1.NewTime(p.cfg.Clock.Now())
	resp, err := c.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: handle, VolumePath: target})
	if err != nil {
		return nil, false, fmt.Errorf("NodeGetVolumeStats of volume %s: %w", handle, err)
	}
	if resp.GetUsage() == nil {
		return nil, false, errors.New("failed to get usage from response. usage is nil")
	}
	zero := func() *uint64 { var v uint64; return &v }
	out := &statsapi.FsStats{Time: now, CapacityBytes: zero(), AvailableBytes: zero(), UsedBytes: zero(),
		Inodes: zero(), InodesFree: zero(), InodesUsed: zero()}
	for _, u := range resp.GetUsage() {
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			*out.CapacityBytes, *out.AvailableBytes, *out.UsedBytes = nonNegative(u.GetTotal()), nonNegative(u.GetAvailable()), nonNegative(u.GetUsed())
		case csipb.VolumeUsage_INODES:
			*out.Inodes, *out.InodesFree, *out.InodesUsed = nonNegative(u.GetTotal()), nonNegative(u.GetAvailable()), nonNegative(u.GetUsed())
		default:
			klog.FromContext(ctx).Error(nil, "Unknown unit in VolumeUsage", "driver", driver, "unit", u.GetUnit().String())
		}
	}
	return out, true, nil
}

// foundVolData reads the vol_data.json of the volume volumemgr keeps in
// dir: the pod's volume directory, or a block volume's link in
// POD/volumeDevices (its data in .../volumeDevices/PV/data).
func (p *Plugin) foundVolData(dir string) (map[string]string, error) {
	if filepath.Base(filepath.Dir(filepath.Dir(dir))) == "volumeDevices" &&
		filepath.Base(filepath.Dir(dir)) == volumemgr.EscapePluginName(PluginName) {
		return readVolData(p.blockDataDir(filepath.Base(dir)))
	}
	return readVolData(dir)
}

func nonNegative(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

var _ volumemgr.QualifiedNamer = (*Plugin)(nil)

// QualifiedName is upstream's plugin name of the volume set up in dir,
// "kubernetes.io/csi:DRIVER", read from its vol_data.json (a block
// volume's: block.go); PluginName when that cannot be read.
func (p *Plugin) QualifiedName(dir string) string {
	data, err := p.foundVolData(dir)
	if errors.Is(err, fs.ErrNotExist) { // a block volume set up by this process?
		vols := filepath.Dir(filepath.Dir(dir)) // POD/volumes
		if spec := p.blockSpec(types.UID(filepath.Base(filepath.Dir(vols))), filepath.Base(dir)); spec != "" {
			data, err = readVolData(p.blockDataDir(spec))
		}
	}
	if err != nil || data[keyDriver] == "" {
		return PluginName
	}
	return PluginName + ":" + data[keyDriver]
}
