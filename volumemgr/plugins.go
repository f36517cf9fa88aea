package volumemgr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The names of the built-in plugins, as upstream.
const (
	EmptyDirPluginName    = "kubernetes.io/empty-dir"
	HostPathPluginName    = "kubernetes.io/host-path"
	ConfigMapPluginName   = "kubernetes.io/configmap"
	SecretPluginName      = "kubernetes.io/secret"
	DownwardAPIPluginName = "kubernetes.io/downward-api"
	ProjectedPluginName   = "kubernetes.io/projected"
)

// host is what the built-in plugins share.
type host struct {
	mounter     Mounter
	objects     ObjectGetter
	tokens      *tokenCache
	clock       clock.PassiveClock
	allocatable v1.ResourceList
}

// builtinPlugins returns the built-in plugins over h.
func builtinPlugins(h *host) []Plugin {
	return []Plugin{
		&emptyDirPlugin{h}, &hostPathPlugin{},
		&configMapPlugin{h}, &secretPlugin{h}, &downwardAPIPlugin{h}, &projectedPlugin{h},
		&imagePlugin{},
	}
}

// emptyDirPlugin: a fresh directory per pod, on disk or (medium Memory) on
// its own tmpfs.
type emptyDirPlugin struct{ h *host }

func (*emptyDirPlugin) Name() string                   { return EmptyDirPluginName }
func (*emptyDirPlugin) CanSupport(vol *v1.Volume) bool { return vol.EmptyDir != nil }

// readyFile marks a finished emptyDir set-up, so a restart does not redo
// the ownership walk over the volume's content (upstream's layout).
func readyFile(podDir, name string) string {
	return filepath.Join(podDir, "plugins", EscapePluginName(EmptyDirPluginName), name, "ready")
}

func (p *emptyDirPlugin) SetUp(ctx context.Context, req *SetUpRequest) (*SetUpResult, error) {
	src := req.Volume.EmptyDir
	res := &SetUpResult{Path: req.Dir, SELinuxRelabel: true}
	ready := readyFile(req.PodDir, req.Volume.Name)
	_, rerr := os.Stat(ready)
	_, derr := os.Stat(req.Dir)
	done := rerr == nil && derr == nil
	switch src.Medium {
	case v1.StorageMediumDefault:
		if done {
			return res, nil
		}
		if err := makeVolumeDir(req.Dir, src.Mode); err != nil {
			return nil, err
		}
	case v1.StorageMediumMemory:
		if done {
			mt, err := readMountTable(ctx, p.h.mounter)
			if err != nil {
				return nil, err
			}
			if mp, ok := mt.at(req.Dir); ok && mp.Type == "tmpfs" {
				return res, nil
			}
		}
		if err := makeVolumeDir(req.Dir, src.Mode); err != nil {
			return nil, err
		}
		size := memoryVolumeSize(req.Pod, src.SizeLimit, p.h.allocatable)
		if err := ensureTmpfs(ctx, p.h.mounter, req.Dir, size); err != nil {
			return nil, err
		}
	default:
		if strings.HasPrefix(string(src.Medium), string(v1.StorageMediumHugePages)) {
			return nil, fmt.Errorf("emptyDir medium %q is not supported by this node agent", src.Medium)
		}
		return nil, fmt.Errorf("unknown storage medium %q", src.Medium)
	}
	if err := applyFSGroup(req.Dir, req.Pod, false); err != nil {
		// As upstream: a failed ownership change does not fail the volume.
		klog.FromContext(ctx).Error(err, "Unable to apply fsGroup to an emptyDir volume", "path", req.Dir)
	}
	if err := os.MkdirAll(filepath.Dir(ready), 0o750); err != nil {
		return nil, err
	}
	if err := os.WriteFile(ready, nil, 0o600); err != nil {
		return nil, err
	}
	return res, nil
}

func (p *emptyDirPlugin) TearDown(ctx context.Context, req *TearDownRequest) error {
	marker := filepath.Dir(readyFile(req.PodDir, req.VolumeName))
	if err := os.RemoveAll(marker); err != nil {
		return err
	}
	return tearDownDir(ctx, p.h.mounter, req.Dir)
}

// hostPathPlugin: a path of the host, checked against the volume's type.
type hostPathPlugin struct{}

func (*hostPathPlugin) Name() string                   { return HostPathPluginName }
func (*hostPathPlugin) CanSupport(vol *v1.Volume) bool { return vol.HostPath != nil }

func (*hostPathPlugin) SetUp(_ context.Context, req *SetUpRequest) (*SetUpResult, error) {
	src := req.Volume.HostPath
	if slices.Contains(strings.Split(filepath.ToSlash(src.Path), "/"), "..") {
		return nil, fmt.Errorf("invalid HostPath `%s`: must not contain '..'", src.Path)
	}
	if src.Type != nil && *src.Type != v1.HostPathUnset {
		if err := checkHostPathType(src.Path, *src.Type); err != nil {
			return nil, err
		}
	}
	return &SetUpResult{Path: src.Path}, nil
}

// TearDown does nothing: the path belongs to the host.
func (*hostPathPlugin) TearDown(context.Context, *TearDownRequest) error { return nil }

// checkHostPathType checks (or, for the OrCreate types, creates) path as
// upstream does, with its messages.
func checkHostPathType(path string, t v1.HostPathType) error {
	switch t {
	case v1.HostPathDirectoryOrCreate:
		if !pathExists(path) {
			if err := os.MkdirAll(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
		return expectType(path, v1.HostPathDirectory, "directory")
	case v1.HostPathDirectory:
		return expectType(path, v1.HostPathDirectory, "directory")
	case v1.HostPathFileOrCreate:
		if !pathExists(path) {
			f, err := os.OpenFile(path, os.O_CREATE, 0o644)
			if f != nil {
				_ = f.Close()
			}
			if err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
		return expectType(path, v1.HostPathFile, "file")
	case v1.HostPathFile:
		return expectType(path, v1.HostPathFile, "file")
	case v1.HostPathSocket:
		return expectType(path, v1.HostPathSocket, "socket file")
	case v1.HostPathCharDev:
		return expectType(path, v1.HostPathCharDev, "character device")
	case v1.HostPathBlockDev:
		return expectType(path, v1.HostPathBlockDev, "block device")
	}
	return fmt.Errorf("%s is an invalid volume type", t)
}

func pathExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func expectType(path string, want v1.HostPathType, what string) error {
	got, err := hostPathTypeOf(path)
	if err != nil {
		return fmt.Errorf("hostPath type check failed, %s is not a %s, unable to determine its type: %w", path, what, err)
	}
	if got != want {
		return fmt.Errorf("hostPath type check failed: %s is not a %s, it's a %s", path, what, got)
	}
	return nil
}

// hostPathTypeOf stats path (following symlinks) and names its type as the
// API does.
func hostPathTypeOf(path string) (v1.HostPathType, error) {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("path %q does not exist", path)
	}
	if err != nil {
		return "", err
	}
	m := info.Mode()
	switch {
	case m.IsDir():
		return v1.HostPathDirectory, nil
	case m.IsRegular():
		return v1.HostPathFile, nil
	case m&os.ModeSocket != 0:
		return v1.HostPathSocket, nil
	case m&os.ModeCharDevice != 0:
		return v1.HostPathCharDev, nil
	case m&os.ModeDevice != 0:
		return v1.HostPathBlockDev, nil
	}
	return "", errors.New("only recognise file, directory, socket, block device and character device")
}
