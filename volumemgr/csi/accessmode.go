package csi

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/volumemgr"
)

// firstAccessMode is the access mode upstream gives a driver for a PV:
// its first, ReadWriteOnce when it lists none.
func firstAccessMode(modes []v1.PersistentVolumeAccessMode) v1.PersistentVolumeAccessMode {
	if len(modes) == 0 {
		return v1.ReadWriteOnce
	}
	return modes[0]
}

// csiAccessMode maps a Kubernetes access mode to the CSI one, as upstream
// does: for a driver with the SINGLE_NODE_MULTI_WRITER node capability
// (multiWriter) ReadWriteOnce is SINGLE_NODE_MULTI_WRITER and
// ReadWriteOncePod SINGLE_NODE_SINGLE_WRITER; for any other both are
// SINGLE_NODE_WRITER, the only single-node writer mode it knows.
func csiAccessMode(mode v1.PersistentVolumeAccessMode, multiWriter bool) csipb.VolumeCapability_AccessMode_Mode {
	switch mode {
	case v1.ReadWriteOnce:
		if multiWriter {
			return csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
		}
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	case v1.ReadWriteOncePod:
		if multiWriter {
			return csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	case v1.ReadOnlyMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case v1.ReadWriteMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	}
	return csipb.VolumeCapability_AccessMode_UNKNOWN
}

// driverAccessMode is the CSI access mode of src for the driver c
// connects to, which SetUp asks for its node capabilities (upstream asks
// before each stage, publish and expansion).
func driverAccessMode(ctx context.Context, c *nodeClient, src *source) (csipb.VolumeCapability_AccessMode_Mode, error) {
	multiWriter, err := c.hasCapability(ctx, csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER)
	if err != nil {
		return csipb.VolumeCapability_AccessMode_UNKNOWN, err
	}
	return csiAccessMode(src.accessMode, multiWriter), nil
}

// errSinglePodInUse is upstream's error for a second pod of a
// ReadWriteOncePod volume.
var errSinglePodInUse = errors.New("volume uses the ReadWriteOncePod access mode and is already in use by another pod")

// singlePod reports whether only one pod on the node may use the volume
// at a time: a PV whose only access mode is ReadWriteOncePod (with more
// than one mode upstream cannot tell which one the pod means, and does
// not enforce it).
func (s *source) singlePod() bool {
	return s.pv != nil && len(s.pv.Spec.AccessModes) == 1 && s.pv.Spec.AccessModes[0] == v1.ReadWriteOncePod
}

// checkSinglePod fails the set-up of a ReadWriteOncePod volume for pod
// while another pod on the node has it mounted, with upstream's error of
// step (MountVolume.SetUp, or MapVolume.SetUpDevice for a raw block
// volume). It is called with the volume's lock held, before the volume is
// published for pod: the set-ups of one volume are serialized, so the
// first pod's publish is in the mount table by the time the second's
// check reads it, and a publish left by an earlier run counts too.
func (p *Plugin) checkSinglePod(ctx context.Context, src *source, pod types.UID, step string) error {
	if !src.singlePod() {
		return nil
	}
	mps, err := p.cfg.Mounter.MountPoints(ctx)
	if err != nil {
		return err
	}
	mounted := make(map[string]bool, len(mps))
	for _, mp := range mps {
		mounted[mp.Path] = true
	}
	other, err := p.mountedForOtherPod(src, pod, mounted)
	if err != nil {
		return err
	}
	if other {
		return &volumemgr.StepError{Step: step, Volume: src.pv.Name, Err: errSinglePodInUse}
	}
	return nil
}

// mountedForOtherPod reports whether a pod other than pod has src
// published, by the mount table (mounted): the target of a pod volume
// directory naming the volume, or a raw block volume's publish target of
// another pod.
func (p *Plugin) mountedForOtherPod(src *source, pod types.UID, mounted map[string]bool) (bool, error) {
	dirs, err := p.podVolumeDirs(src.driver, src.handle)
	if err != nil {
		return false, err
	}
	pods := filepath.Join(p.cfg.RootDir, "pods")
	for _, dir := range dirs {
		rel, err := filepath.Rel(pods, dir)
		if err != nil {
			continue
		}
		uid, _, _ := strings.Cut(rel, string(filepath.Separator))
		if types.UID(uid) != pod && mounted[filepath.Join(dir, "mount")] {
			return true, nil
		}
	}
	entries, err := os.ReadDir(p.blockPublishDir(src.pv.Name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	for _, e := range entries {
		if types.UID(e.Name()) != pod && mounted[filepath.Join(p.blockPublishDir(src.pv.Name), e.Name())] {
			return true, nil
		}
	}
	return false, nil
}
