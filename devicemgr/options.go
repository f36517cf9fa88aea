package devicemgr

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// ContainerOptions returns what the plugins asked for c in their Allocate
// answers (environment, mounts, device nodes, annotations), to merge into
// the container's options at creation, as upstream's
// GetDeviceRunContainerOptions. A container of an active pod that asks
// for plugin resources it has not been given yet (the agent restarted
// between admission and creation) is allocated now. Plugins that asked
// for it get their PreStartContainer call. The result is never nil
// without an error; it is empty for a container without devices.
//
// Where two plugins set the same variable, container path or annotation
// the first (by resource name) wins, as upstream. CDI device names in
// the answers go to ContainerOptions.CDIDevices, each once; with
// Config.NoCDI set they are an error instead, so that the container is
// not created without its devices.
func (m *Manager) ContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container) (*nodekit.ContainerOptions, error) {
	if pod == nil || c == nil {
		return nil, errors.New("devicemgr: ContainerOptions needs a pod and a container")
	}
	uid := string(pod.UID)
	m.mu.Lock()
	names := m.deviceRequests(pod, c)
	missing := false
	for _, name := range names {
		missing = missing || m.pods.container(uid, c.Name, name) == nil
	}
	m.mu.Unlock()
	if missing && m.podActive(pod) {
		klog.FromContext(ctx).V(2).Info("Allocating devices of a container at creation", "pod", klog.KObj(pod), "container", c.Name)
		m.allocMu.Lock()
		err := m.allocatePod(ctx, pod, nil, c.Name)
		m.allocMu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	for _, name := range names {
		if err := m.preStart(ctx, uid, c.Name, name); err != nil {
			return nil, err
		}
	}
	opts := m.runOptions(ctx, uid, c.Name)
	if m.noCDI != "" && len(opts.CDIDevices) > 0 {
		return nil, fmt.Errorf("devicemgr: container %q of pod %s: device plugins answered with CDI devices %v, which this node cannot inject: %s", c.Name, klog.KObj(pod), opts.CDIDevices, m.noCDI)
	}
	return opts, nil
}

// podActive reports whether pod is among the active pods (always, without
// Config.ActivePods).
func (m *Manager) podActive(pod *v1.Pod) bool {
	if m.activePods == nil {
		return true
	}
	for _, p := range m.activePods() {
		if p.UID == pod.UID {
			return true
		}
	}
	return false
}

// preStart calls the plugin's PreStartContainer with the container's
// devices of resource, when the plugin asked for it.
func (m *Manager) preStart(ctx context.Context, uid, container, resource string) error {
	m.mu.Lock()
	rs := m.resources[resource]
	if rs == nil {
		m.mu.Unlock()
		return fmt.Errorf("endpoint not found in cache for a registered resource: %s", resource)
	}
	ep := rs.ep
	// A resource restored from the checkpoint has no options until its
	// plugin registers again: nothing to call, as upstream.
	if ep == nil || !ep.preStartRequired() {
		m.mu.Unlock()
		return nil
	}
	devs := m.pods.container(uid, container, resource)
	stopped := !rs.stopped.IsZero()
	m.mu.Unlock()
	if devs == nil {
		return fmt.Errorf("no devices found allocated in local cache for pod %s, container %s, resource %s", uid, container, resource)
	}
	if stopped {
		return fmt.Errorf("device plugin PreStartContainer rpc failed with err: endpoint %s has been stopped", ep.socket)
	}
	klog.FromContext(ctx).V(4).Info("Issuing a PreStartContainer call", "resource", resource, "podUID", uid, "container", container)
	return ep.preStartContainer(ctx, sets.List(devs))
}

// runOptions merges the Allocate answers of one container.
func (m *Manager) runOptions(ctx context.Context, uid, container string) *nodekit.ContainerOptions {
	logger := klog.FromContext(ctx)
	opts := &nodekit.ContainerOptions{}
	m.mu.Lock()
	defer m.mu.Unlock()
	byResource := m.pods[uid][container]
	names := make([]string, 0, len(byResource))
	for name := range byResource {
		names = append(names, name)
	}
	sort.Strings(names)
	envs, devices, mounts := map[string]string{}, map[string]string{}, map[string]string{}
	cdi := map[string]bool{}
	for _, name := range names {
		resp := byResource[name].resp
		if resp == nil {
			continue
		}
		for _, k := range sortedKeys(resp.Envs) {
			v := resp.Envs[k]
			if prev, ok := envs[k]; ok {
				if prev != v {
					logger.Error(nil, "Environment variable has conflicting setting", "name", k, "kept", prev, "dropped", v, "resource", name)
				}
				continue
			}
			envs[k] = v
			opts.Envs = append(opts.Envs, nodekit.EnvVar{Name: k, Value: v})
		}
		for _, d := range resp.Devices {
			if prev, ok := devices[d.ContainerPath]; ok {
				if prev != d.HostPath {
					logger.Error(nil, "Container device has conflicting mapping host devices", "containerPath", d.ContainerPath, "kept", prev, "dropped", d.HostPath, "resource", name)
				}
				continue
			}
			devices[d.ContainerPath] = d.HostPath
			opts.Devices = append(opts.Devices, nodekit.Device{PathOnHost: d.HostPath, PathInContainer: d.ContainerPath, Permissions: d.Permissions})
		}
		for _, mt := range resp.Mounts {
			if prev, ok := mounts[mt.ContainerPath]; ok {
				if prev != mt.HostPath {
					logger.Error(nil, "Container mount has conflicting mapping host mounts", "containerPath", mt.ContainerPath, "kept", prev, "dropped", mt.HostPath, "resource", name)
				}
				continue
			}
			mounts[mt.ContainerPath] = mt.HostPath
			opts.Mounts = append(opts.Mounts, nodekit.Mount{Name: mt.ContainerPath, ContainerPath: mt.ContainerPath, HostPath: mt.HostPath, ReadOnly: mt.ReadOnly})
		}
		for _, k := range sortedKeys(resp.Annotations) {
			v := resp.Annotations[k]
			if prev, ok := opts.Annotations[k]; ok {
				if prev != v {
					logger.Error(nil, "Annotation has conflicting setting", "name", k, "kept", prev, "dropped", v, "resource", name)
				}
				continue
			}
			if opts.Annotations == nil {
				opts.Annotations = map[string]string{}
			}
			opts.Annotations[k] = v
		}
		for _, d := range resp.CdiDevices {
			if n := d.GetName(); n != "" && !cdi[n] {
				cdi[n] = true
				opts.CDIDevices = append(opts.CDIDevices, n)
			}
		}
	}
	return opts
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// WrapOptions returns a nodekit.ContainerOptionsFunc that adds the
// container's device options to what next resolves (nil next: only the
// device options), in upstream's order: the devices' environment, mounts
// and device nodes come before the others, and the others' annotations
// win on conflict.
func (m *Manager) WrapOptions(next nodekit.ContainerOptionsFunc) nodekit.ContainerOptionsFunc {
	return func(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*nodekit.ContainerOptions, error) {
		dev, err := m.ContainerOptions(ctx, pod, c)
		if err != nil || next == nil {
			return dev, err
		}
		o, err := next(ctx, pod, c, podIPs)
		if err != nil || o == nil {
			return o, err
		}
		out := *o
		out.Envs = append(dev.Envs, o.Envs...)
		out.Mounts = append(dev.Mounts, o.Mounts...)
		out.Devices = append(dev.Devices, o.Devices...)
		out.CDIDevices = append(dev.CDIDevices, o.CDIDevices...)
		if len(dev.Annotations) > 0 {
			out.Annotations = maps.Clone(dev.Annotations)
			maps.Copy(out.Annotations, o.Annotations)
		}
		return &out, nil
	}
}
