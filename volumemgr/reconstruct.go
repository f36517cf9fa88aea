package volumemgr

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// scanOnce rebuilds the actual state from disk on the first Reconcile after
// start: every ROOT/pods/UID/volumes/PLUGIN/NAME directory of a known plugin
// and every raw block volume's entry ROOT/pods/UID/volumeDevices/PLUGIN/NAME
// (upstream's pod device map path, NAME the PV's name; such a volume is
// named DeviceVolumePrefix+NAME and its Dir is the entry) becomes a volume
// to tear down unless its pod is added again (a block volume: unless a
// set-up of the re-added pod's volume returns the entry as its Device),
// and every pod
// with subPath bind mounts or other mounts below its directory is recorded so
// its directories are cleaned when it goes. Directories of unknown plugins
// are left alone (their mounts keep the pod directory). A failed scan is
// retried at the next Reconcile.
func (m *Manager) scanOnce(ctx context.Context) {
	m.mu.Lock()
	scanned := m.scanned
	m.mu.Unlock()
	if scanned {
		return
	}
	log := logger(ctx)
	found, err := m.scanPods(ctx)
	if err != nil {
		log.Error(err, "Unable to scan pod directories for volumes; will retry")
		return
	}
	for _, vols := range found {
		m.nameFound(ctx, vols) // inuse.go
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scanned = true
	for uid, vols := range found {
		a := m.actual[uid]
		if a == nil {
			a = &actualPod{volumes: map[string]*volumeState{}}
			m.actual[uid] = a
		}
		if _, ok := m.desired[uid]; ok {
			a.claimed = true
		}
		for _, v := range vols {
			if _, ok := a.volumes[v.name]; !ok {
				a.volumes[v.name] = v
			}
		}
		log.V(2).Info("Found volumes of an earlier run", "podUID", uid, "volumes", len(vols))
	}
	m.notifyAllLocked()
}

// scanPods lists the volumes on disk by pod.
func (m *Manager) scanPods(ctx context.Context) (map[types.UID][]*volumeState, error) {
	podsDir := filepath.Join(m.cfg.RootDir, "pods")
	pods, err := readDirIfExists(podsDir)
	if err != nil || len(pods) == 0 {
		return nil, err
	}
	mt, err := readMountTable(ctx, m.mounter)
	if err != nil {
		return nil, err
	}
	log := logger(ctx)
	out := map[types.UID][]*volumeState{}
	for _, pe := range pods {
		if !pe.IsDir() {
			continue
		}
		uid := types.UID(pe.Name())
		podDir := m.podDir(uid)
		plugins, err := readDirIfExists(filepath.Join(podDir, "volumes"))
		if err != nil {
			return nil, err
		}
		vols := []*volumeState{}
		for _, plde := range plugins {
			if !plde.IsDir() {
				continue
			}
			name := UnescapePluginName(plde.Name())
			p := m.pluginNamed(name)
			if p == nil {
				log.Info("Leaving volumes of an unknown plugin in place", "podUID", uid, "plugin", name)
				continue
			}
			entries, err := readDirIfExists(filepath.Join(podDir, "volumes", plde.Name()))
			if err != nil {
				return nil, err
			}
			for _, ve := range entries {
				if !ve.IsDir() {
					continue
				}
				vols = append(vols, &volumeState{name: ve.Name(), plugin: p, dir: filepath.Join(podDir, "volumes", plde.Name(), ve.Name())})
			}
		}
		devs, err := m.scanDevices(ctx, podDir)
		if err != nil {
			return nil, err
		}
		vols = append(vols, devs...)
		_, serr := os.Stat(filepath.Join(podDir, subPathsDir))
		if len(vols) > 0 || serr == nil || len(mt.below(podDir)) > 0 {
			out[uid] = vols
		}
		for _, mp := range mt.below(podDir) {
			if !strings.HasPrefix(mp, filepath.Join(podDir, "volumes")+"/") && !strings.HasPrefix(mp, filepath.Join(podDir, subPathsDir)+"/") {
				log.Info("Found a mount in a pod directory outside its volumes", "podUID", uid, "path", mp)
			}
		}
	}
	return out, nil
}

// DeviceVolumePrefix starts the name of a raw block volume found on disk
// in POD/volumeDevices/PLUGIN/NAME (TearDownRequest.VolumeName), which no
// pod volume name can start with.
const DeviceVolumePrefix = "volumeDevices/"

// scanDevices lists the raw block volumes of a pod on disk: the entries
// (links) of POD/volumeDevices/PLUGIN of known plugins.
func (m *Manager) scanDevices(ctx context.Context, podDir string) ([]*volumeState, error) {
	plugins, err := readDirIfExists(filepath.Join(podDir, "volumeDevices"))
	if err != nil {
		return nil, err
	}
	var vols []*volumeState
	for _, plde := range plugins {
		if !plde.IsDir() {
			continue
		}
		p := m.pluginNamed(UnescapePluginName(plde.Name()))
		if p == nil {
			logger(ctx).Info("Leaving block volumes of an unknown plugin in place", "podDir", podDir, "plugin", UnescapePluginName(plde.Name()))
			continue
		}
		entries, err := readDirIfExists(filepath.Join(podDir, "volumeDevices", plde.Name()))
		if err != nil {
			return nil, err
		}
		for _, ve := range entries {
			vols = append(vols, &volumeState{name: DeviceVolumePrefix + ve.Name(), plugin: p,
				dir: filepath.Join(podDir, "volumeDevices", plde.Name(), ve.Name())})
		}
	}
	return vols, nil
}

// readDirIfExists is os.ReadDir with a missing directory read as empty.
func readDirIfExists(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return entries, err
}
