package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/volumemgr"
)

// keyMode is the vol_data.json key saying a volume is a raw block volume
// ("Block"); absent for file system volumes.
const keyMode = "volumeMode"

// Raw block volumes (a PV of volumeMode Block named in volumeDevices) are
// laid out as upstream's csiBlockMapper lays them out:
//
//	ROOT/plugins/kubernetes.io/csi/volumeDevices/staging/PV          NodeStageVolume's staging path
//	ROOT/plugins/kubernetes.io/csi/volumeDevices/publish/PV/PODUID   NodePublishVolume's target (a file the driver makes)
//	POD/volumeDevices/kubernetes.io~csi/PV                           a symlink to the target: the device's host path for the runtime
//	ROOT/plugins/kubernetes.io/csi/volumeDevices/PV/dev/PODUID       a bind mount of the target with a loop device on it (blocklock.go)
//
// vol_data.json (with volumeMode "Block") stays in the pod's volume
// directory, POD/volumes/kubernetes.io~csi/VOLUME, where TearDown and the
// reconstruction after a restart find every CSI volume of a pod.
func (p *Plugin) blockDir() string {
	return filepath.Join(p.cfg.RootDir, "plugins", PluginName, "volumeDevices")
}

func (p *Plugin) blockStagingPath(spec string) string {
	return filepath.Join(p.blockDir(), "staging", spec)
}

func (p *Plugin) blockPublishPath(spec string, pod types.UID) string {
	return filepath.Join(p.blockDir(), "publish", spec, string(pod))
}

// podDeviceMapPath is POD/volumeDevices/kubernetes.io~csi/PV.
func podDeviceMapPath(podDir, spec string) string {
	return filepath.Join(podDir, "volumeDevices", volumemgr.EscapePluginName(PluginName), spec)
}

// blockCapability is the capability of a raw block volume.
func blockCapability(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

// setUpBlock stages (STAGE_UNSTAGE_VOLUME) and publishes a raw block
// volume and links it into the pod's volumeDevices directory; the link is
// the device containers get. The volume lock is held.
func (p *Plugin) setUpBlock(ctx context.Context, c *nodeClient, req *volumemgr.SetUpRequest, src *source, pol *driverPolicy,
	data, publishContext map[string]string) (*volumemgr.SetUpResult, error) {
	spec := data[keySpecName]
	data[keyMode] = string(v1.PersistentVolumeBlock)
	capability := blockCapability(src.mode)
	target := p.blockPublishPath(spec, req.Pod.UID)
	staging := ""
	staged, err := c.hasCapability(ctx, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return nil, errors.New(logf("blockMapper.stageVolumeForBlock failed to check STAGE_UNSTAGE_VOLUME capability: %v", err))
	}
	if staged {
		staging = p.blockStagingPath(spec)
	}
	if pol.republish || !p.isPublished(target) {
		if staged {
			if err := p.stageBlock(ctx, c, src, staging, capability, publishContext); err != nil {
				return nil, err
			}
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			return nil, errors.New(logf("blockMapper.publishVolumeForBlock failed to create dir %s:  %v", filepath.Dir(target), err))
		}
		if err := p.publish(ctx, c, req, src, pol, capability, staging, target, data, publishContext); err != nil {
			return nil, err
		}
		p.setPublished(target, true)
	}
	link := podDeviceMapPath(req.PodDir, spec)
	if err := ensureSymlink(target, link); err != nil {
		return nil, fmt.Errorf("blkUtil.MapDevice failed. devicePath: %s, podVolumeMapPath:%s, volumeMapName: %s, bindMount: false: %w",
			target, filepath.Dir(link), spec, err)
	}
	if err := p.lockDevice(ctx, spec, req.Pod.UID, target); err != nil { // blocklock.go
		return nil, err
	}
	expandable, err := p.expand(ctx, c, req.Pod, src, target, staging)
	if err != nil {
		return nil, err
	}
	return &volumemgr.SetUpResult{Path: req.Dir, ReadOnly: src.readOnly, Device: link, Refresh: pol.republish || expandable}, nil
}

// stageBlock calls NodeStageVolume of a block volume into staging (a
// directory the node creates, as upstream).
func (p *Plugin) stageBlock(ctx context.Context, c *nodeClient, src *source, staging string, capability *csipb.VolumeCapability,
	publishContext map[string]string) error {
	secrets, err := p.secrets(ctx, "NodeStage", src.stageSecret)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return errors.New(logf("blockMapper.stageVolumeForBlock failed to create dir %s: %v", staging, err))
	}
	_, err = c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: src.handle, StagingTargetPath: staging, VolumeCapability: capability, VolumeContext: src.attributes,
		Secrets: secrets, PublishContext: publishContext,
	})
	if err != nil {
		return fmt.Errorf("MapVolume.SetUpDevice failed for volume %q: %w", src.pv.Name, err)
	}
	return nil
}

// ensureSymlink makes link point to target, replacing another link.
func ensureSymlink(target, link string) error {
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
		return err
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Symlink(target, link)
}

// tearDownBlock undoes setUpBlock in reverse: the pod's link, the
// descriptor lock, then NodeUnpublishVolume, then (when no other pod on the node publishes the
// volume) NodeUnstageVolume. The volume lock is held.
func (p *Plugin) tearDownBlock(ctx context.Context, c *nodeClient, req *volumemgr.TearDownRequest, data map[string]string) (err error) {
	spec, handle, driver := data[keySpecName], data[keyHandle], data[keyDriver]
	link := podDeviceMapPath(req.PodDir, spec)
	if err = os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blkUtil.UnmapDevice failed. podDeviceUnmapPath:%s, volumeMapName: %s: %w", filepath.Dir(link), spec, err)
	}
	removeEmpty(filepath.Dir(link), filepath.Dir(filepath.Dir(link)))
	if err = p.unlockDevice(ctx, spec, req.PodUID); err != nil {
		return err
	}
	target := p.blockPublishPath(spec, req.PodUID)
	p.setPublished(target, false)
	if _, err := c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: target}); err != nil {
		return errors.New(logf("blockMapper.unpublishVolumeForBlock failed: %v", err))
	}
	if err := p.removeIfUnmounted(ctx, target); err != nil {
		return err
	}
	removeEmpty(filepath.Dir(target))
	if err := os.Remove(filepath.Join(req.Dir, volDataFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := p.removeIfUnmounted(ctx, req.Dir); err != nil {
		return err
	}
	inUse, err := p.publishedElsewhere(driver, handle)
	if err != nil || inUse {
		return err
	}
	staging := p.blockStagingPath(spec)
	if _, err := os.Stat(staging); errors.Is(err, fs.ErrNotExist) {
		return nil // not staged
	}
	defer p.cfg.Metrics.operation(driver, "unmap_device")(&err)
	if _, err = c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: staging}); err != nil {
		return errors.New(logf("blockMapper.unstageVolumeForBlock failed: %v", err))
	}
	if err = p.removeIfUnmounted(ctx, staging); err != nil {
		return errors.New(logf("blockMapper.unstageVolumeForBlock failed to remove staging path after NodeUnstageVolume() error [%s]: %v", staging, err))
	}
	return nil
}

// removeEmpty removes each of dirs that is empty, in order.
func removeEmpty(dirs ...string) {
	for _, d := range dirs {
		if entries, err := os.ReadDir(d); err == nil && len(entries) == 0 {
			_ = os.Remove(d)
		}
	}
}

// volumeModeMismatch refuses a Block volume a container mounts and a
// Filesystem volume a container names in volumeDevices, with upstream's
// messages, before the driver is called.
func volumeModeMismatch(pod *v1.Pod, name string, block bool) error {
	mounted, device := volumemgr.UsesVolume(pod, name)
	switch {
	case mounted && block:
		return fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeMounts", name, v1.PersistentVolumeBlock)
	case device && !block:
		return fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeDevices", name, v1.PersistentVolumeFilesystem)
	}
	return nil
}

// operationName is upstream's name of an operation on a file system
// volume (fs) or a block volume (block).
func operationName(isBlock bool, fs, block string) string {
	if isBlock {
		return block
	}
	return fs
}

type discardEvents struct{}

func (discardEvents) Eventf(runtime.Object, string, string, string, ...interface{}) {}
