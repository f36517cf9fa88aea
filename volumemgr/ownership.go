package volumemgr

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	v1 "k8s.io/api/core/v1"
)

// Permission bits added to the files of a volume when the pod has an
// fsGroup, as upstream: group read-write (read-only for volumes that are
// mounted read-only), and on directories group search plus setgid so new
// files inherit the group.
const (
	rwGroupMask = os.FileMode(0o660)
	roGroupMask = os.FileMode(0o440)
	dirExecMask = os.FileMode(0o110)
)

// fsGroupOf returns the pod's fsGroup, or nil.
func fsGroupOf(pod *v1.Pod) *int64 {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	return pod.Spec.SecurityContext.FSGroup
}

// applyFSGroup gives every file under dir the group gid and the group
// permission bits (see the masks), unless the pod asks for
// OnRootMismatch and the root already looks right. Symlinks are re-owned
// but not followed.
func applyFSGroup(dir string, pod *v1.Pod, readOnly bool) error {
	gid := fsGroupOf(pod)
	if gid == nil {
		return nil
	}
	mask := rwGroupMask
	if readOnly {
		mask = roGroupMask
	}
	sc := pod.Spec.SecurityContext
	if sc.FSGroupChangePolicy != nil && *sc.FSGroupChangePolicy == v1.FSGroupChangeOnRootMismatch && rootMatches(dir, *gid, mask) {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking (an old data version)
			}
			return err
		}
		if err := os.Lchown(p, -1, int(*gid)); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := mask
		if d.IsDir() {
			m |= os.ModeSetgid | dirExecMask
		}
		return os.Chmod(p, info.Mode()|m)
	})
}

// rootMatches reports whether dir already has group gid, the mask bits and
// setgid.
func rootMatches(dir string, gid int64, mask os.FileMode) bool {
	info, err := os.Stat(dir)
	if err != nil || !info.IsDir() {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || int64(st.Gid) != gid {
		return false
	}
	want := mask | dirExecMask
	return info.Mode().Perm()&want == want && info.Mode()&os.ModeSetgid != 0
}

// fsUserOf returns the user every container of the pod runs as, or nil when
// they differ or one does not say (upstream's rule for token files).
func fsUserOf(pod *v1.Pod) *int64 {
	var user *int64
	all := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers)+len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.InitContainers {
		all = append(all, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		all = append(all, &pod.Spec.Containers[i])
	}
	for i := range pod.Spec.EphemeralContainers {
		c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		all = append(all, &c)
	}
	for _, c := range all {
		u := effectiveRunAsUser(pod, c)
		if u == nil || (user != nil && *user != *u) {
			return nil
		}
		user = u
	}
	return user
}

func effectiveRunAsUser(pod *v1.Pod, c *v1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.RunAsUser
	}
	return nil
}

// ApplyFSGroup gives the files under dir the pod's fsGroup (nothing when
// the pod has none) as the built-in plugins do, honouring
// fsGroupChangePolicy; plugins outside the package (CSI) call it for
// volumes whose driver leaves ownership to the node.
func ApplyFSGroup(dir string, pod *v1.Pod, readOnly bool) error {
	return applyFSGroup(dir, pod, readOnly)
}
