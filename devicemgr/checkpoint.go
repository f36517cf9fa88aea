package devicemgr

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekit/nodekit/devicemgr/internal/checkpoint"
	"github.com/nodekit/nodekit/internal/ckpt"
	"github.com/nodekit/nodekit/internal/fsutil"
)

// The checkpoint is upstream's file byte for byte in layout and checksum
// ({"Data":{"PodDeviceEntries":[...],"RegisteredDevices":{...}},
// "Checksum":N}, FNV-32a over upstream's hash printing of Data), so
// kubelet and a nodekit agent can take over from each other's node.
// RegisteredDevices holds the healthy devices of each resource, as
// upstream; only its keys are used on restore.

// restore loads the checkpoint, if any, into the empty manager.
func (m *Manager) restore() error {
	b, found, err := ckpt.Read(m.ckPath)
	if err != nil {
		return fmt.Errorf("devicemgr: %w", err)
	}
	if !found {
		return nil
	}
	entries, registered, err := checkpoint.Unmarshal(b)
	if err != nil {
		return fmt.Errorf("devicemgr: %w: %s: %w; drain the node and delete the file", ErrCorruptCheckpoint, m.ckPath, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			m.logger.Error(err, "Dropped a checkpoint entry with an unreadable allocation response", "checkpoint", m.ckPath,
				"podUID", e.PodUID, "container", e.ContainerName, "resource", e.ResourceName)
			continue
		}
		numa := map[int64][]string{}
		for node, ids := range e.DeviceIDs {
			numa[node] = append([]string(nil), ids...)
		}
		m.pods.insert(e.PodUID, e.ContainerName, e.ResourceName, &allocation{numa: numa, resp: resp})
	}
	m.allocated = m.pods.devices()
	for name := range registered {
		m.markStopped(m.resourceFor(name))
	}
	m.logger.V(2).Info("Restored the device manager checkpoint", "checkpoint", m.ckPath, "entries", len(entries), "resources", len(registered))
	return nil
}

// persist writes the checkpoint from the current state.
func (m *Manager) persist() error {
	m.ckMu.Lock()
	defer m.ckMu.Unlock()
	m.mu.Lock()
	entries, registered, err := m.snapshot()
	m.mu.Unlock()
	var b []byte
	if err == nil {
		b, err = checkpoint.Marshal(entries, registered)
	}
	if err == nil {
		err = fsutil.WriteFileSwap(m.ckPath, b, 0o644, fsutil.NoSync(m.noSync))
	}
	if err != nil {
		return fmt.Errorf("devicemgr: write checkpoint %s: %w", m.ckPath, err)
	}
	return nil
}

// snapshot renders the state in checkpoint form, sorted so the file is
// stable. Callers hold m.mu.
func (m *Manager) snapshot() ([]checkpoint.PodDevicesEntry, map[string][]string, error) {
	var entries []checkpoint.PodDevicesEntry
	marshal := proto.MarshalOptions{Deterministic: true}
	for _, uid := range sortedMapKeys(m.pods) {
		containers := m.pods[uid]
		for _, name := range sortedMapKeys(containers) {
			resources := containers[name]
			for _, res := range sortedMapKeys(resources) {
				a := resources[res]
				resp, err := marshal.Marshal(a.resp)
				if err != nil {
					return nil, nil, fmt.Errorf("marshal the allocation of %s to pod %s container %s: %w", res, uid, name, err)
				}
				numa := checkpoint.DevicesPerNUMA{}
				for node, ids := range a.numa {
					numa[node] = append([]string(nil), ids...)
				}
				entries = append(entries, checkpoint.PodDevicesEntry{
					PodUID: uid, ContainerName: name, ResourceName: res, DeviceIDs: numa, AllocResp: resp,
				})
			}
		}
	}
	registered := make(map[string][]string, len(m.resources))
	for name, rs := range m.resources {
		registered[name] = sets.List(rs.healthy)
	}
	return entries, registered, nil
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
