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
// laid out exactly as upstream's csiBlockMapper lays them out, so that
// kubelet finds the block volumes of a node nodekit ran and nodekit
// kubelet's:
//
//	ROOT/plugins/kubernetes.io/csi/volumeDevices/PV/data/vol_data.json  what TearDown and a restart read (upstream's five keys)
//	ROOT/plugins/kubernetes.io/csi/volumeDevices/staging/PV             NodeStageVolume's staging path
//	ROOT/plugins/kubernetes.io/csi/volumeDevices/publish/PV/PODUID      NodePublishVolume's target (a file the driver makes)
//	POD/volumeDevices/kubernetes.io~csi/PV                              a symlink to the target: the device's host path for the runtime
//	ROOT/plugins/kubernetes.io/csi/volumeDevices/PV/dev/PODUID          a bind mount of the target with a loop device on it (blocklock.go)
//
// Nothing of a block volume is in the pod's volume directory
// (POD/volumes/kubernetes.io~csi/VOLUME): after a restart volumemgr finds
// it by its link in POD/volumeDevices. Before this layout nodekit kept
// vol_data.json (with "volumeMode": "Block") in the pod's volume
// directory; such a volume is still torn down from there, and a set-up of
// it removes that file and directory (migration).
func (p *Plugin) blockDir() string {
	return filepath.Join(p.cfg.RootDir, "plugins", PluginName, "volumeDevices")
}

// blockVolumeDir is ROOT/plugins/kubernetes.io/csi/volumeDevices/PV (the
// name escaped as upstream's EscapeQualifiedName).
func (p *Plugin) blockVolumeDir(spec string) string {
	return filepath.Join(p.blockDir(), volumemgr.EscapePluginName(spec))
}

// blockDataDir holds the block volume's vol_data.json.
func (p *Plugin) blockDataDir(spec string) string {
	return filepath.Join(p.blockVolumeDir(spec), "data")
}

func (p *Plugin) blockStagingPath(spec string) string {
	return filepath.Join(p.blockDir(), "staging", spec)
}

func (p *Plugin) blockPublishDir(spec string) string {
	return filepath.Join(p.blockDir(), "publish", spec)
}

func (p *Plugin) blockPublishPath(spec string, pod types.UID) string {
	return filepath.Join(p.blockPublishDir(spec), string(pod))
}

// podDeviceMapPath is POD/volumeDevices/kubernetes.io~csi/PV.
func podDeviceMapPath(podDir, spec string) string {
	return filepath.Join(podDir, "volumeDevices", volumemgr.EscapePluginName(PluginName), spec)
}

// deviceEntry returns the PV name when dir is a pod device map path
// (POD/volumeDevices/kubernetes.io~csi/PV, a block volume volumemgr found
// on disk).
func deviceEntry(podDir, dir string) (string, bool) {
	if filepath.Dir(dir) != filepath.Join(podDir, "volumeDevices", volumemgr.EscapePluginName(PluginName)) {
		return "", false
	}
	return filepath.Base(dir), true
}

func blockKey(pod types.UID, volume string) string { return string(pod) + "/" + volume }

// rememberBlock records the PV name of a pod's block volume; "" forgets it.
func (p *Plugin) rememberBlock(pod types.UID, volume, spec string) {
	p.blockMu.Lock()
	defer p.blockMu.Unlock()
	if spec == "" {
		delete(p.blockSpecs, blockKey(pod, volume))
	} else {
		p.blockSpecs[blockKey(pod, volume)] = spec
	}
}

func (p *Plugin) blockSpec(pod types.UID, volume string) string {
	p.blockMu.Lock()
	defer p.blockMu.Unlock()
	return p.blockSpecs[blockKey(pod, volume)]
}

// blockVolData is the vol_data.json of a block volume, upstream's keys only.
func blockVolData(data map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{keySpecName, keyHandle, keyDriver, keyNode, keyAttach} {
		out[k] = data[k]
	}
	return out
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
	target := p.blockPublishPath(spec, req.Pod.UID)
	p.want(src, req.Dir) // wanted.go
	if !p.isPublished(target) {
		if err := p.checkSinglePod(ctx, src, req.Pod.UID, "MapVolume.SetUpDevice"); err != nil { // accessmode.go
			return nil, err
		}
	}
	p.rememberBlock(req.Pod.UID, req.Volume.Name, spec)
	dataDir := p.blockDataDir(spec)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, errors.New(logf("failed to create data dir %s:  %v", dataDir, err))
	}
	if err := writeVolData(dataDir, blockVolData(data)); err != nil {
		return nil, errors.New(logf("csi.NewBlockVolumeMapper failed to save volume info data: %v", err))
	}
	capability := blockCapability(src.mode)
	staging := ""
	staged, err := c.hasCapability(ctx, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return nil, errors.New(logf("blockMapper.stageVolumeForBlock failed to check STAGE_UNSTAGE_VOLUME capability: %v", err))
	}
	if staged {
		staging = p.blockStagingPath(spec)
	}
	mapped := pol.republish || !p.isPublished(target)
	if mapped {
		if staged {
			if err := p.stageBlock(ctx, c, src, staging, capability, publishContext); err != nil {
				return nil, err
			}
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			return nil, errors.New(logf("blockMapper.publishVolumeForBlock failed to create dir %s:  %v", filepath.Dir(target), err))
		}
		if err := p.publish(ctx, c, req, src, pol, capability, staging, target, nil, publishContext); err != nil {
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
	if err := p.dropOldLayout(ctx, req.Dir); err != nil {
		return nil, err
	}
	if mapped { // upstream's two events of a MapVolume
		for _, suffix := range []string{fmt.Sprintf("globalMapPath %q", filepath.Dir(p.globalMapPath(spec, req.Pod.UID))),
			fmt.Sprintf("volumeMapPath %q", filepath.Dir(link))} {
			p.cfg.Events.Eventf(req.Pod, v1.EventTypeNormal, "SuccessfulMountVolume", "MapVolume.MapPodDevice succeeded for volume %q %s", spec, suffix)
		}
	}
	expandable, err := p.expand(ctx, c, req.Pod, src, target, staging)
	if err != nil {
		return nil, err
	}
	return &volumemgr.SetUpResult{Path: link, ReadOnly: src.readOnly, Device: link, Refresh: pol.republish || expandable}, nil
}

// dropOldLayout removes the vol_data.json of a block volume that an
// earlier nodekit kept in the pod's volume directory, and that directory.
func (p *Plugin) dropOldLayout(ctx context.Context, dir string) error {
	old, err := readVolData(dir)
	if err != nil || old[keyMode] != string(v1.PersistentVolumeBlock) {
		return nil //nolint:nilerr // nothing of the old layout
	}
	if err := os.Remove(filepath.Join(dir, volDataFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return p.removeIfUnmounted(ctx, dir)
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
		return &volumemgr.StepError{Step: "MapVolume.SetUpDevice", Volume: src.pv.Name, Err: err}
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
// descriptor lock, then NodeUnpublishVolume, then (when no other pod on
// the node publishes the volume) NodeUnstageVolume and the volume's
// files, as upstream's TearDownDevice. spec is the PV name, data its
// vol_data.json. The volume lock is held.
func (p *Plugin) tearDownBlock(ctx context.Context, c *nodeClient, req *volumemgr.TearDownRequest, spec string, data map[string]string) (err error) {
	handle, driver := data[keyHandle], data[keyDriver]
	if err := removeDeviceLink(req.PodDir, spec); err != nil {
		return err
	}
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
	if _, entry := deviceEntry(req.PodDir, req.Dir); !entry {
		if err := p.dropOldLayout(ctx, req.Dir); err != nil {
			return err
		}
		p.rememberBlock(req.PodUID, req.VolumeName, "")
	}
	inUse, err := p.blockPublishedElsewhere(spec, driver, handle)
	if err != nil || inUse || p.isWanted(driver, handle) {
		return err
	}
	staging := p.blockStagingPath(spec)
	if _, err := os.Stat(staging); err == nil {
		if err := p.unstageBlock(ctx, c, driver, handle, staging); err != nil {
			return err
		}
	}
	return p.removeBlockFiles(spec)
}

// removeDeviceLink removes the pod's link POD/volumeDevices/kubernetes.io~csi/PV.
func removeDeviceLink(podDir, spec string) error {
	link := podDeviceMapPath(podDir, spec)
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blkUtil.UnmapDevice failed. podDeviceUnmapPath:%s, volumeMapName: %s: %w", filepath.Dir(link), spec, err)
	}
	removeEmpty(filepath.Dir(link), filepath.Dir(filepath.Dir(link)))
	return nil
}

// blockPublishedElsewhere reports whether another pod publishes the block
// volume: a target of another pod in .../volumeDevices/publish/PV, or a
// pod volume directory of the old layout naming it.
func (p *Plugin) blockPublishedElsewhere(spec, driver, handle string) (bool, error) {
	entries, err := os.ReadDir(p.blockPublishDir(spec))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if len(entries) > 0 {
		return true, nil
	}
	return p.publishedElsewhere(driver, handle)
}

// unstageBlock calls NodeUnstageVolume and removes the staging path.
func (p *Plugin) unstageBlock(ctx context.Context, c *nodeClient, driver, handle, staging string) (err error) {
	defer p.cfg.Metrics.operation(driver, "unmap_device")(&err)
	if _, err = c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: staging}); err != nil {
		return errors.New(logf("blockMapper.unstageVolumeForBlock failed: %v", err))
	}
	if err = p.removeIfUnmounted(ctx, staging); err != nil {
		return errors.New(logf("blockMapper.unstageVolumeForBlock failed to remove staging path after NodeUnstageVolume() error [%s]: %v", staging, err))
	}
	return nil
}

// removeBlockFiles removes what is left of a block volume no pod uses, as
// upstream's cleanupOrphanDeviceFiles: the empty publish directory, the
// staging path, and .../volumeDevices/PV (data/vol_data.json and an
// empty dev/); the staging and publish directories of all block volumes
// stay, as upstream's.
func (p *Plugin) removeBlockFiles(spec string) error {
	removeEmpty(p.blockPublishDir(spec))
	if err := os.Remove(p.blockStagingPath(spec)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errors.New(logf("failed to delete volume staging path [%s]: %v", p.blockStagingPath(spec), err))
	}
	if err := os.Remove(filepath.Join(p.blockDataDir(spec), volDataFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dir := p.blockVolumeDir(spec)
	removeEmpty(filepath.Join(dir, "data"), filepath.Join(dir, "dev"), dir)
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
