package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// The "descriptor lock" of a mapped block volume, as upstream's
// MapBlockVolume: the published device file is bind-mounted on the
// global map path ROOT/plugins/kubernetes.io/csi/volumeDevices/PV/dev/PODUID
// and a loop device (losetup) is attached to that path, which keeps the
// device open while the pod runs, so that it cannot silently be removed
// and another device attached under its name. UnmapBlockVolume's part
// undoes both before the unpublish.

// globalMapPath is ROOT/plugins/kubernetes.io/csi/volumeDevices/PV/dev/PODUID.
func (p *Plugin) globalMapPath(spec string, pod types.UID) string {
	return filepath.Join(p.blockVolumeDir(spec), "dev", string(pod))
}

// lockDevice bind-mounts device on the global map path and attaches a
// loop device to it, unless both are there already.
func (p *Plugin) lockDevice(ctx context.Context, spec string, pod types.UID, device string) error {
	global := p.globalMapPath(spec, pod)
	if err := os.MkdirAll(filepath.Dir(global), 0o750); err != nil {
		return fmt.Errorf("blkUtil.MapDevice failed. devicePath: %s, globalMapPath:%s, podUID: %s, bindMount: true: %w", device, filepath.Dir(global), pod, err)
	}
	mounted, err := p.mounted(ctx, global)
	if err != nil {
		return err
	}
	if !mounted {
		f, err := os.OpenFile(global, os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			return fmt.Errorf("blkUtil.MapDevice failed. devicePath: %s, globalMapPath:%s, podUID: %s, bindMount: true: %w", device, filepath.Dir(global), pod, err)
		}
		_ = f.Close()
		if err := p.cfg.Mounter.Mount(ctx, device, global, "", []string{"bind"}); err != nil {
			return fmt.Errorf("blkUtil.MapDevice failed. devicePath: %s, globalMapPath:%s, podUID: %s, bindMount: true: %w", device, filepath.Dir(global), pod, err)
		}
	}
	if dev, err := loopDeviceOf(global); err != nil || dev != "" {
		return err
	}
	if out, err := exec.CommandContext(ctx, "losetup", "-f", global).CombinedOutput(); err != nil {
		return fmt.Errorf("blkUtil.AttachFileDevice failed. globalMapPath:%s, podUID: %s: losetup -f %s failed: %w: %s",
			filepath.Dir(global), pod, global, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// unlockDevice detaches the loop device of the global map path and
// unmounts and removes it; it is done when there is nothing of it left.
func (p *Plugin) unlockDevice(ctx context.Context, spec string, pod types.UID) error {
	global := p.globalMapPath(spec, pod)
	dev, err := loopDeviceOf(global)
	if err != nil {
		return err
	}
	if dev != "" {
		if out, err := exec.CommandContext(ctx, "losetup", "-d", dev).CombinedOutput(); err != nil {
			return fmt.Errorf("blkUtil.DetachFileDevice failed. globalUnmapPath:%s, podUID: %s: losetup -d %s failed: %w: %s",
				filepath.Dir(global), pod, dev, err, strings.TrimSpace(string(out)))
		}
	}
	mounted, err := p.mounted(ctx, global)
	if err != nil {
		return err
	}
	if mounted {
		if err := p.cfg.Mounter.Unmount(ctx, global); err != nil {
			return fmt.Errorf("blkUtil.UnmapDevice failed. globalUnmapPath:%s, podUID: %s, bindMount: true: %w", filepath.Dir(global), pod, err)
		}
	}
	if err := os.Remove(global); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	removeEmpty(filepath.Dir(global), filepath.Dir(filepath.Dir(global)))
	return nil
}

// loopDeviceOf returns the loop device whose backing file is path
// (/sys/block/loop*/loop/backing_file, as upstream), or "".
func loopDeviceOf(path string) (string, error) {
	backing, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return "", err
	}
	for _, f := range backing {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		if strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == path {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f))), nil
		}
	}
	return "", nil
}
