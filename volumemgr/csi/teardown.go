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

	"github.com/nodekit/nodekit/volumemgr"
)

// TearDown unpublishes the volume from req.Dir/mount and, when no other
// pod on the node still publishes it, unstages it. It reads what to call
// from vol_data.json, so it works for volumes found on disk after a
// restart (a block volume: from its link in POD/volumeDevices, block.go).
// It is observed as upstream's "volume_unmount", and the unstage as
// "unmount_device" (a block volume: "unmap_volume" and "unmap_device").
func (p *Plugin) TearDown(ctx context.Context, req *volumemgr.TearDownRequest) (err error) {
	wanted, wasWanted := p.unwant(req.Dir) // wanted.go
	data, spec, err := p.tearDownData(req)
	if errors.Is(err, fs.ErrNotExist) {
		if spec != "" { // a block volume with no vol_data.json: nothing to call the driver on
			p.rememberBlock(req.PodUID, req.VolumeName, "")
			if _, entry := deviceEntry(req.PodDir, req.Dir); entry {
				return removeDeviceLink(req.PodDir, spec)
			}
		}
		// Never published (or already torn down): only an empty dir to remove.
		if err := p.removeIfUnmounted(ctx, filepath.Join(req.Dir, "mount")); err != nil {
			return err
		}
		if err := p.removeIfUnmounted(ctx, req.Dir); err != nil {
			return err
		}
		p.forgetDir(req.PodUID, filepath.Base(req.Dir))
		if wasWanted {
			return p.unstageUnwanted(ctx, wanted)
		}
		return nil
	}
	if err != nil {
		return errors.New(logf("unmounter failed to load volume data file [%s]: %v", req.Dir, err))
	}
	driver, handle := data[keyDriver], data[keyHandle]
	defer p.cfg.Metrics.operation(driver, operationName(spec != "", "volume_unmount", "unmap_volume"))(&err)
	defer p.lock(driver, handle)()
	c, err := p.tearDownClient(driver)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if spec != "" {
		return p.tearDownBlock(ctx, c, req, spec, data) // block.go
	}
	target := filepath.Join(req.Dir, "mount")
	p.setPublished(target, false)
	p.forgetSELinux(driver, handle, req.PodUID)
	if _, err := c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: target}); err != nil {
		return errors.New(logf("Unmounter.TearDownAt failed: %v", err))
	}
	if err := p.removeIfUnmounted(ctx, target); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(req.Dir, volDataFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := p.removeIfUnmounted(ctx, req.Dir); err != nil {
		return err
	}
	p.forgetDir(req.PodUID, filepath.Base(req.Dir))
	return p.unstageIfUnused(ctx, c, driver, handle)
}

// tearDownClient connects to driver for a tear-down, with upstream's
// error when the driver is not registered.
func (p *Plugin) tearDownClient(driver string) (*nodeClient, error) {
	endpoint, err := p.cfg.Drivers.endpoint(driver)
	if err != nil {
		return nil, errors.New(logf("Unmounter.TearDownAt failed to get CSI client: %v", err))
	}
	return dial(endpoint, driver, p.cfg.Metrics)
}

// tearDownData returns the vol_data.json of the volume req names and, for
// a raw block volume, its PV name: the data of a block volume found on
// disk by its link (POD/volumeDevices/kubernetes.io~csi/PV) or set up by
// this process is in ROOT/plugins/kubernetes.io/csi/volumeDevices/PV/data;
// a file system volume's (and a block volume's of the layout before
// upstream's) is in req.Dir. The error wraps fs.ErrNotExist when there is
// none.
func (p *Plugin) tearDownData(req *volumemgr.TearDownRequest) (map[string]string, string, error) {
	if spec, ok := deviceEntry(req.PodDir, req.Dir); ok {
		data, err := readVolData(p.blockDataDir(spec))
		return data, spec, err
	}
	data, err := readVolData(req.Dir)
	switch {
	case err == nil && data[keyMode] == string(v1.PersistentVolumeBlock):
		return data, data[keySpecName], nil
	case err == nil || !errors.Is(err, fs.ErrNotExist):
		return data, "", err
	}
	spec := p.blockSpec(req.PodUID, req.VolumeName)
	if spec == "" {
		return nil, "", err
	}
	data, err = readVolData(p.blockDataDir(spec))
	return data, spec, err
}

// unstageIfUnused calls NodeUnstageVolume once no pod directory publishes
// the volume any more and no pod wants it (wanted.go), and removes the
// staging directories.
func (p *Plugin) unstageIfUnused(ctx context.Context, c *nodeClient, driver, handle string) (err error) {
	staging := p.stagingDir(driver, handle)
	if _, err := os.Stat(filepath.Join(filepath.Dir(staging), volDataFile)); errors.Is(err, fs.ErrNotExist) {
		return nil // not staged
	}
	inUse, err := p.publishedElsewhere(driver, handle)
	if err != nil || inUse || p.isWanted(driver, handle) {
		return err
	}
	defer p.cfg.Metrics.operation(driver, "unmount_device")(&err)
	p.setPublished(staging, false)
	if _, err := c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: staging}); err != nil {
		return fmt.Errorf("UnmountDevice failed for volume %q: %w", handle, err)
	}
	if err := p.removeIfUnmounted(ctx, staging); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(filepath.Dir(staging), volDataFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return p.removeIfUnmounted(ctx, filepath.Dir(staging))
}

// publishedElsewhere reports whether a pod volume directory still holds a
// vol_data.json naming the volume.
func (p *Plugin) publishedElsewhere(driver, handle string) (bool, error) {
	dirs, err := p.podVolumeDirs(driver, handle)
	return len(dirs) > 0, err
}

// podVolumeDirs returns the pod volume directories
// (ROOT/pods/UID/volumes/kubernetes.io~csi/NAME) whose vol_data.json
// names the volume.
func (p *Plugin) podVolumeDirs(driver, handle string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(p.cfg.RootDir, "pods", "*", "volumes", volumemgr.EscapePluginName(PluginName), "*", volDataFile))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		data, err := readVolData(filepath.Dir(f))
		if err != nil {
			continue // being written or removed
		}
		if data[keyDriver] == driver && data[keyHandle] == handle {
			out = append(out, filepath.Dir(f))
		}
	}
	return out, nil
}
