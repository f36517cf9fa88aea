package volumemgr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/internal/podutil"
)

// EscapePluginName turns a plugin name into its directory name, as
// upstream: "kubernetes.io/empty-dir" becomes "kubernetes.io~empty-dir".
func EscapePluginName(name string) string { return strings.ReplaceAll(name, "/", "~") }

// UnescapePluginName undoes EscapePluginName.
func UnescapePluginName(dir string) string { return strings.ReplaceAll(dir, "~", "/") }

// VolumeDir is where plugin keeps volume name of the pod with directory
// podDir: PODDIR/volumes/ESCAPED-PLUGIN/NAME.
func VolumeDir(podDir, plugin, name string) string {
	return filepath.Join(podDir, "volumes", EscapePluginName(plugin), name)
}

// emptyDirPerm is the mode of a fresh volume directory, as upstream: every
// container user may write it.
const emptyDirPerm = os.FileMode(0o777)

// makeVolumeDir creates dir with mode (0777 unless the volume says), whatever
// the umask.
func makeVolumeDir(dir string, mode *int32) error {
	perm := emptyDirPerm
	if mode != nil {
		perm = os.FileMode(*mode) & os.ModePerm
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if info.Mode().Perm() != perm {
		return os.Chmod(dir, perm)
	}
	return nil
}

// ensureTmpfs makes dir a tmpfs mount point (creating dir first). size is
// the size option in bytes; 0 leaves the kernel's default (half of RAM).
// A directory that did not exist until now has nothing mounted on it, so
// a first set-up mounts without reading the mount table (whose size grows
// with the pods on the node).
func ensureTmpfs(ctx context.Context, m Mounter, dir string, size int64) error {
	_, statErr := os.Lstat(dir)
	created := errors.Is(statErr, fs.ErrNotExist)
	if err := makeVolumeDir(dir, nil); err != nil {
		return err
	}
	if !created {
		mounted, err := isTmpfsMounted(ctx, m, dir)
		if err != nil || mounted {
			return err
		}
	}
	var opts []string
	if size > 0 {
		opts = append(opts, "size="+strconv.FormatInt(size, 10))
	}
	return m.Mount(ctx, "tmpfs", dir, "tmpfs", opts)
}

// isTmpfsMounted reports whether an existing dir is a tmpfs mount point:
// from two stats when they can tell (the refresh of a set-up volume), else
// from the mount table.
func isTmpfsMounted(ctx context.Context, m Mounter, dir string) (bool, error) {
	if isTmpfsMountPoint(dir) {
		return true, nil
	}
	mt, err := readMountTable(ctx, m)
	if err != nil {
		return false, err
	}
	mp, ok := mt.at(dir)
	return ok && mp.Type == "tmpfs", nil
}

// isTmpfsMountPoint reports, from two stats, whether dir is the root of a
// tmpfs mount: a tmpfs file system on a device other than its parent's, as
// upstream's IsLikelyNotMountPoint. It is the fast path of ensureTmpfs, run
// on every refresh of every secret, configMap and projected volume; a false
// answer falls back to the mount table (a bind mount of a tmpfs directory
// onto itself, or a mounter that mounts nothing on the host, as in tests).
func isTmpfsMountPoint(dir string) bool {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		return false
	}
	var self, parent unix.Stat_t
	if unix.Stat(dir, &self) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return self.Dev != parent.Dev
}

// maxStackedMounts bounds how many file systems tearDownDir unmounts from one
// directory before giving up.
const maxStackedMounts = 8

// tearDownDir unmounts dir while it is a mount point, then removes it
// unless something is still mounted below it.
func tearDownDir(ctx context.Context, m Mounter, dir string) error {
	for range maxStackedMounts {
		mt, err := readMountTable(ctx, m)
		if err != nil {
			return err
		}
		if _, ok := mt.at(dir); !ok {
			return removeUnmounted(ctx, m, dir)
		}
		if err := m.Unmount(ctx, dir); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s is still a mount point after %d unmounts", dir, maxStackedMounts)
}

// ErrStillMounted is returned (wrapped) when a directory is not removed
// because something is mounted at or below it.
var ErrStillMounted = errors.New("still mounted")

// removeUnmounted removes dir and everything in it, unless something is
// mounted at or below it: removing across a mount would delete the mounted
// file system's content.
func removeUnmounted(ctx context.Context, m Mounter, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	mt, err := readMountTable(ctx, m)
	if err != nil {
		return err
	}
	if below := mt.below(dir); len(below) > 0 {
		return fmt.Errorf("not removing %s: %s is %w", dir, below[0], ErrStillMounted)
	}
	return os.RemoveAll(dir)
}

// removeEmpty removes dir if it is an empty directory.
func removeEmpty(dir string) error {
	err := os.Remove(dir)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if entries, rerr := os.ReadDir(dir); rerr == nil && len(entries) > 0 {
		return nil // not empty: left alone
	}
	return err
}

// memoryVolumeSize is the size of a memory-backed volume, as upstream: the
// smallest of the volume's sizeLimit, the pod's memory limit and the node's
// allocatable memory that is known and positive; 0 when none is.
func memoryVolumeSize(pod *v1.Pod, sizeLimit *resource.Quantity, allocatable v1.ResourceList) int64 {
	var size int64
	pick := func(q *resource.Quantity) {
		if q == nil || q.Sign() <= 0 {
			return
		}
		if v := q.Value(); size == 0 || v < size {
			size = v
		}
	}
	if q, ok := allocatable[v1.ResourceMemory]; ok {
		pick(&q)
	}
	pick(podMemoryLimit(pod))
	pick(sizeLimit)
	return size
}

// podMemoryLimit is the pod-level memory limit, or what the containers'
// limits add up to when every container sets one: regular plus sidecar
// containers, or an init container plus the sidecars started before it if
// that is more.
func podMemoryLimit(pod *v1.Pod) *resource.Quantity {
	if pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Limits[v1.ResourceMemory]; ok {
			return &q
		}
	}
	var sidecars, peak int64
	for _, c := range pod.Spec.InitContainers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			return nil
		}
		if podutil.IsSidecar(&c) {
			sidecars += q.Value()
			continue
		}
		peak = max(peak, sidecars+q.Value())
	}
	total := sidecars
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			return nil
		}
		total += q.Value()
	}
	return resource.NewQuantity(max(total, peak), resource.BinarySI)
}

// makeNestedMountpoints creates, inside the volume directory dir, the
// directories on which a container mounts other volumes right below this
// one, so the runtime need not create them inside a read-only mount (as
// upstream). Mount points nested below those are left to the runtime.
func makeNestedMountpoints(pod *v1.Pod, volName, dir string) error {
	for _, mounts := range allContainerMounts(pod) {
		var paths []string
		for _, m := range mounts {
			paths = append(paths, filepath.Clean(m.MountPath))
		}
		sort.Strings(paths)
		for _, m := range mounts {
			if m.Name != volName {
				continue
			}
			base := filepath.Clean(m.MountPath)
			if strings.HasPrefix(base, "../") {
				return fmt.Errorf("invalid container mount point %v", base)
			}
			var made []string
			for _, p := range paths {
				rel, ok := strings.CutPrefix(p, base+"/")
				if !ok || rel == "" {
					continue
				}
				if slices.ContainsFunc(made, func(n string) bool { return strings.HasPrefix(p, n+"/") }) {
					continue // below a mount point already made
				}
				made = append(made, p)
				if slices.Contains(strings.Split(rel, "/"), "..") {
					return fmt.Errorf("invalid nested mount point %q in volume %q", rel, volName)
				}
				if err := os.MkdirAll(filepath.Join(dir, rel), 0o755); err != nil {
					return fmt.Errorf("unable to create nested volume mountpoints: %w", err)
				}
			}
		}
	}
	return nil
}

// allContainerMounts returns the volume mounts of every container (init,
// regular, ephemeral), one slice per container.
func allContainerMounts(pod *v1.Pod) [][]v1.VolumeMount {
	var out [][]v1.VolumeMount
	for _, c := range pod.Spec.InitContainers {
		out = append(out, c.VolumeMounts)
	}
	for _, c := range pod.Spec.Containers {
		out = append(out, c.VolumeMounts)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		out = append(out, c.VolumeMounts)
	}
	return out
}
