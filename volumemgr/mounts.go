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
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/expansion"
	"github.com/nodekit/nodekit/internal/podutil"
)

// ContainerMounts returns the mounts of container c of pod, one per
// volumeMount, in order: the volume's host path (or, with subPath or
// subPathExpr, a safe bind mount of the path inside it, see the subPath
// notes), read-only when the mount or the volume says so, and the mount
// propagation. An image volume's mount has no host path but the image
// reference (Mount.Image) and subPath (Mount.ImageSubPath) for the Runtime
// to mount, always read-only. It fits podopts.Builder.VolumeMounts. The pod's volumes must
// be set up (WaitForAttachAndMount); it blocks on the file system, the
// mount table and, for subPathExpr, Config.ContainerEnv. Errors carry
// upstream's messages, for the CreateContainerConfigError status; details
// that would reveal the host's file system are logged instead.
func (m *Manager) ContainerMounts(ctx context.Context, pod *v1.Pod, c *v1.Container) ([]nodekit.Mount, error) {
	return m.containerMounts(ctx, pod, c, func() (map[string]string, error) { return m.containerEnv(ctx, pod, c) })
}

// ContainerMountsWithEnv is ContainerMounts with the container's resolved
// environment given (for subPathExpr) instead of asked of
// Config.ContainerEnv: a caller that has just computed it (with the pod's
// IPs) passes it on.
func (m *Manager) ContainerMountsWithEnv(ctx context.Context, pod *v1.Pod, c *v1.Container, env []nodekit.EnvVar) ([]nodekit.Mount, error) {
	return m.containerMounts(ctx, pod, c, func() (map[string]string, error) { return envMap(env), nil })
}

func (m *Manager) containerMounts(ctx context.Context, pod *v1.Pod, c *v1.Container, envOf func() (map[string]string, error)) ([]nodekit.Mount, error) {
	if pod == nil || c == nil {
		return nil, errors.New("volumemgr: ContainerMounts needs a pod and a container")
	}
	vols := m.mountSources(pod)
	var env map[string]string
	out := make([]nodekit.Mount, 0, len(c.VolumeMounts))
	for i, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			if env == nil {
				var err error
				if env, err = envOf(); err != nil {
					return nil, err
				}
			}
			var err error
			if sub, err = expandSubPathExpr(vm.SubPathExpr, env); err != nil {
				return nil, err
			}
		}
		mount, err := m.containerMount(ctx, pod, c, i, vm, v, sub)
		if err != nil {
			return nil, err
		}
		out = append(out, mount)
	}
	return out, nil
}

// mountSource is what a container mount of a set-up volume needs: its
// host path (none for an image volume, which the runtime mounts), whether
// it is read-only and to be relabelled, and the image of an image volume.
type mountSource struct {
	path     string
	readOnly bool
	relabel  bool
	image    *v1.ImageVolumeSource
}

// mountSources returns the pod's volumes that are set up, by name.
func (m *Manager) mountSources(pod *v1.Pod) map[string]mountSource {
	vols := map[string]mountSource{}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.actual[pod.UID]; a != nil {
		for name, v := range a.volumes {
			if v.setUp {
				vols[name] = mountSource{path: v.path, readOnly: v.readOnly, relabel: v.relabel}
				if v.spec != nil && v.spec.Image != nil {
					vols[name] = mountSource{readOnly: true, image: v.spec.Image}
				}
			}
		}
	}
	return vols
}

// containerMount is the mount of volume v for c's i-th volume mount vm,
// with sub its resolved subPath: a subPath of a volume on the host is
// bind-mounted on its own, one of an image volume is left to the runtime.
func (m *Manager) containerMount(ctx context.Context, pod *v1.Pod, c *v1.Container, i int, vm v1.VolumeMount, v mountSource, sub string) (nodekit.Mount, error) {
	hostPath, imageSub := v.path, ""
	switch {
	case v.image != nil:
		// The runtime mounts the image; subPath names a directory in
		// it, checked here as for any volume and by the runtime for
		// existence.
		if err := checkSubPath(sub); err != nil {
			return nodekit.Mount{}, err
		}
		hostPath, imageSub = "", sub
	case sub != "":
		var err error
		if hostPath, err = m.subPathMount(ctx, pod, c, i, vm, v.path, sub); err != nil {
			return nodekit.Mount{}, err
		}
	}
	if err := checkPropagation(vm.MountPropagation); err != nil {
		return nodekit.Mount{}, err
	}
	rro, err := podutil.ResolveRecursiveReadOnly(vm, m.supportsRRO(ctx, pod, vm))
	if err != nil {
		return nodekit.Mount{}, fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
	}
	containerPath := vm.MountPath
	if !filepath.IsAbs(containerPath) {
		containerPath = "/" + containerPath
	}
	mount := nodekit.Mount{
		Name: vm.Name, ContainerPath: containerPath, HostPath: hostPath,
		ReadOnly: vm.ReadOnly || v.readOnly, RecursiveReadOnly: rro, Propagation: vm.MountPropagation,
		SELinuxRelabel: v.relabel,
	}
	if v.image != nil {
		mount.Image, mount.ImageSubPath = v.image.Reference, imageSub
	}
	return mount, nil
}

// supportsRRO asks Config.RecursiveReadOnly about pod's runtime handler,
// only for a mount that asks for a recursive read-only mode.
func (m *Manager) supportsRRO(ctx context.Context, pod *v1.Pod, vm v1.VolumeMount) bool {
	if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == v1.RecursiveReadOnlyDisabled || m.cfg.RecursiveReadOnly == nil {
		return false
	}
	return m.cfg.RecursiveReadOnly.SupportsRecursiveReadOnly(ctx, pod)
}

// subPathMount checks sub, creates it in the volume if missing and returns
// the bind mount of it.
func (m *Manager) subPathMount(ctx context.Context, pod *v1.Pod, c *v1.Container, index int, vm v1.VolumeMount, volPath, sub string) (string, error) {
	log := logger(ctx).WithValues("pod", klog.KObj(pod), "container", c.Name, "volumeMount", vm.Name)
	if err := checkSubPath(sub); err != nil {
		return "", err
	}
	full := filepath.Join(volPath, sub)
	if _, err := os.Stat(full); errors.Is(err, fs.ErrNotExist) {
		// Made now with the volume's mode, so that the runtime does not
		// make it later with its own.
		info, err := os.Stat(volPath)
		if err != nil {
			return "", err
		}
		if err := safeMakeDir(volPath, sub, info.Mode()); err != nil && !errors.Is(err, fs.ErrExist) {
			log.Error(err, "Unable to create a subPath directory")
			return "", fmt.Errorf("failed to create subPath directory for volumeMount %q of container %q", vm.Name, c.Name)
		}
	}
	target := subPathTarget(m.podDir(pod.UID), vm.Name, c.Name, index)
	path, err := bindSubPath(ctx, m.mounter, volPath, sub, target)
	if err != nil {
		log.Error(err, "Unable to prepare a subPath")
		return "", fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", vm.Name, c.Name)
	}
	return path, nil
}

// checkSubPath refuses an absolute subPath or one that steps out of the
// volume, with upstream's messages.
func checkSubPath(sub string) error {
	if filepath.IsAbs(sub) {
		return fmt.Errorf("error SubPath `%s` must not be an absolute path", sub)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(sub), "/"), "..") {
		return fmt.Errorf("unable to provision SubPath `%s`: must not contain '..'", sub)
	}
	return nil
}

// containerEnv returns the container's environment by name.
func (m *Manager) containerEnv(ctx context.Context, pod *v1.Pod, c *v1.Container) (map[string]string, error) {
	env := map[string]string{}
	if m.cfg.ContainerEnv == nil {
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				env[e.Name] = expansion.Expand(e.Value, env)
			}
		}
		return env, nil
	}
	vars, err := m.cfg.ContainerEnv(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	return envMap(vars), nil
}

// envMap indexes an environment by name; a later definition wins.
func envMap(vars []nodekit.EnvVar) map[string]string {
	env := make(map[string]string, len(vars))
	for _, e := range vars {
		env[e.Name] = e.Value
	}
	return env
}

// expandSubPathExpr expands $(VAR) in expr; a variable that is undefined
// or empty is an error, as upstream.
func expandSubPathExpr(expr string, env map[string]string) (string, error) {
	missing := map[string]bool{}
	for i := 0; i+1 < len(expr); i++ {
		if expr[i] != '$' {
			continue
		}
		switch expr[i+1] {
		case '$':
			i++
		case '(':
			end := strings.IndexByte(expr[i+2:], ')')
			if end < 0 {
				i = len(expr)
				continue
			}
			name := expr[i+2 : i+2+end]
			if env[name] == "" {
				missing[name] = true
			}
			i += 2 + end
		}
	}
	if len(missing) > 0 {
		names := make([]string, 0, len(missing))
		for n := range missing {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("missing value for %s", strings.Join(names, ", "))
	}
	return expansion.Expand(expr, env), nil
}

// checkPropagation refuses an unknown mount propagation mode.
func checkPropagation(p *v1.MountPropagationMode) error {
	if p == nil {
		return nil
	}
	switch *p {
	case v1.MountPropagationNone, v1.MountPropagationHostToContainer, v1.MountPropagationBidirectional:
		return nil
	}
	return fmt.Errorf("invalid MountPropagation mode: %q", *p)
}
