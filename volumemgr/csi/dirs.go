package csi

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/volumemgr"
)

var _ volumemgr.DirNamer = (*Plugin)(nil)

// VolumeDirName names a file-system volume's directory as upstream's volume
// spec name: a claim's (persistentVolumeClaim or generic ephemeral) by its
// bound PV, an inline csi volume by the pod volume. So kubelet and nodekit
// find each other's volumes under POD/volumes/kubernetes.io~csi on a node.
// A volume already in the directory of the pod volume's name (nodekit's
// layout before this one) stays there until its pod goes: its containers
// mount it from there. A raw block volume keeps the pod volume's name (its
// files are elsewhere, block.go).
func (p *Plugin) VolumeDirName(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (string, error) {
	if vol.CSI != nil {
		return "", nil
	}
	byVolume := filepath.Join(p.cfg.RootDir, "pods", string(pod.UID), "volumes", volumemgr.EscapePluginName(PluginName), vol.Name)
	if _, err := os.Stat(filepath.Join(byVolume, volDataFile)); err == nil {
		return "", nil
	}
	src, err := p.resolve(ctx, pod, vol)
	if err != nil {
		return "", err
	}
	if src.block || src.pv == nil {
		return "", nil
	}
	return src.pv.Name, nil
}

// rememberDir records the directory (its last element) a pod's volume was
// published in, for VolumeStats; "" forgets it.
func (p *Plugin) rememberDir(pod types.UID, volume, dir string) {
	p.blockMu.Lock()
	defer p.blockMu.Unlock()
	if dir == "" || dir == volume {
		delete(p.dirs, blockKey(pod, volume))
	} else {
		p.dirs[blockKey(pod, volume)] = dir
	}
}

// forgetDir forgets the volumes of pod published in dir (a TearDown's,
// which may not name the pod volume).
func (p *Plugin) forgetDir(pod types.UID, dir string) {
	p.blockMu.Lock()
	defer p.blockMu.Unlock()
	for k, d := range p.dirs {
		if d == dir && strings.HasPrefix(k, string(pod)+"/") {
			delete(p.dirs, k)
		}
	}
}

// volumeDir is the directory of pod's volume, PV-named when SetUp
// published it so.
func (p *Plugin) volumeDir(pod types.UID, volume string) string {
	p.blockMu.Lock()
	name, ok := p.dirs[blockKey(pod, volume)]
	p.blockMu.Unlock()
	if !ok {
		name = volume
	}
	return filepath.Join(p.cfg.RootDir, "pods", string(pod), "volumes", volumemgr.EscapePluginName(PluginName), name)
}
