package allocation

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/internal/ckpt"
	"github.com/nodekit/nodekit/internal/fsutil"
)

// Upstream kubelet's checkpoint files under the root dir.
const (
	AllocatedFile = "allocated_pods_state"
	ActuatedFile  = "actuated_pods_state"
)

// ErrCorruptCheckpoint is returned by OpenStore when a checkpoint's
// checksum does not match its data.
var ErrCorruptCheckpoint = errors.New("allocation: checkpoint checksum mismatch")

// PodResources is what is recorded for one pod, in upstream's layout (the
// field names are the JSON keys upstream writes).
type PodResources struct {
	// ContainerResources by container name (init and regular).
	ContainerResources map[string]v1.ResourceRequirements
	// PodLevelResources is spec.resources, nil when unset.
	PodLevelResources *v1.ResourceRequirements
	// EmptyDirVolumeLimits is kept as read so a checkpoint round-trips;
	// nodekit records none (memory-backed volume resize is off in v1.37).
	EmptyDirVolumeLimits map[string]*resource.Quantity
}

// DeepCopy returns an independent copy.
func (p PodResources) DeepCopy() PodResources {
	out := PodResources{ContainerResources: make(map[string]v1.ResourceRequirements, len(p.ContainerResources))}
	for k, v := range p.ContainerResources {
		out.ContainerResources[k] = *v.DeepCopy()
	}
	out.PodLevelResources = p.PodLevelResources.DeepCopy()
	if p.EmptyDirVolumeLimits != nil {
		out.EmptyDirVolumeLimits = make(map[string]*resource.Quantity, len(p.EmptyDirVolumeLimits))
		for k, v := range p.EmptyDirVolumeLimits {
			if v != nil {
				q := v.DeepCopy()
				v = &q
			}
			out.EmptyDirVolumeLimits[k] = v
		}
	}
	return out
}

// checkpointInfo is upstream's PodResourceCheckpointInfo.
type checkpointInfo struct {
	Entries map[types.UID]PodResources `json:"entries,omitempty"`
}

// checkpointFile is upstream's Checkpoint: the serialised entries and
// upstream's checksum of that string.
type checkpointFile struct {
	Data     string `json:"data"`
	Checksum uint64 `json:"checksum"`
}

// Store is one checkpointed map of pod UID to PodResources. Every change
// is written to disk before the call returns. It is safe for concurrent
// use.
type Store struct {
	path   string
	noSync bool
	mu     sync.Mutex
	pods   map[types.UID]PodResources
	// encoded holds each pod's JSON member ("uid":record), made when the
	// record is first written, so a write encodes only what changed (see
	// encodeEntries).
	encoded map[types.UID][]byte
}

// OpenStore reads the checkpoint named file under dir (a missing file is
// an empty store). An empty dir keeps the store in memory only.
func OpenStore(dir, file string) (*Store, error) {
	s := &Store{pods: map[types.UID]PodResources{}, encoded: map[types.UID][]byte{}}
	if dir == "" {
		return s, nil
	}
	s.path = filepath.Join(dir, file)
	data, found, err := ckpt.Read(s.path)
	if err != nil || !found {
		return s, err
	}
	var f checkpointFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("allocation: decode %s: %w", s.path, err)
	}
	if ckpt.Checksum(f.Data) != f.Checksum {
		return nil, fmt.Errorf("%w: %s", ErrCorruptCheckpoint, s.path)
	}
	var info checkpointInfo
	if err := json.Unmarshal([]byte(f.Data), &info); err != nil {
		return nil, fmt.Errorf("allocation: decode data of %s: %w", s.path, err)
	}
	for uid, p := range info.Entries {
		if p.ContainerResources == nil {
			p.ContainerResources = map[string]v1.ResourceRequirements{}
		}
		s.pods[uid] = p
	}
	return s, nil
}

// Get returns a copy of the pod's record.
func (s *Store) Get(uid types.UID) (PodResources, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pods[uid]
	if !ok {
		return PodResources{}, false
	}
	return p.DeepCopy(), true
}

// Set records the pod's resources and writes the checkpoint.
func (s *Store) Set(uid types.UID, p PodResources) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.pods[uid]
	s.pods[uid] = p.DeepCopy()
	delete(s.encoded, uid)
	if err := s.writeLocked(); err != nil {
		// The failed write may have cached the new record's member: drop
		// it; the old one is encoded again on the next write.
		delete(s.encoded, uid)
		if had {
			s.pods[uid] = old
		} else {
			delete(s.pods, uid)
		}
		return err
	}
	return nil
}

// SetContainer records one container's resources of a pod already known.
func (s *Store) SetContainer(uid types.UID, name string, r v1.ResourceRequirements) error {
	p, ok := s.Get(uid)
	if !ok {
		p = PodResources{ContainerResources: map[string]v1.ResourceRequirements{}}
	}
	p.ContainerResources[name] = r
	return s.Set(uid, p)
}

// SetPodLevel records the pod-level resources of a pod (nil: none).
func (s *Store) SetPodLevel(uid types.UID, r *v1.ResourceRequirements) error {
	p, ok := s.Get(uid)
	if !ok {
		p = PodResources{ContainerResources: map[string]v1.ResourceRequirements{}}
	}
	p.PodLevelResources = r.DeepCopy()
	return s.Set(uid, p)
}

// Remove forgets the pod.
func (s *Store) Remove(uid types.UID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pods[uid]; !ok {
		return nil
	}
	delete(s.pods, uid)
	delete(s.encoded, uid)
	return s.writeLocked()
}

// RemoveOrphans forgets every pod not in keep.
func (s *Store) RemoveOrphans(keep map[types.UID]bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for uid := range s.pods {
		if !keep[uid] {
			delete(s.pods, uid)
			delete(s.encoded, uid)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return s.writeLocked()
}

func (s *Store) writeLocked() error {
	if s.path == "" {
		return nil
	}
	data, err := s.encodeEntries()
	if err != nil {
		return fmt.Errorf("allocation: encode %s: %w", s.path, err)
	}
	out, err := json.Marshal(checkpointFile{Data: data, Checksum: ckpt.Checksum(data)})
	if err != nil {
		return fmt.Errorf("allocation: encode %s: %w", s.path, err)
	}
	if err := fsutil.WriteFileAtomic(s.path, out, 0o600, fsutil.NoSync(s.noSync)); err != nil {
		return fmt.Errorf("allocation: write %s: %w", s.path, err)
	}
	return nil
}

// encodeEntries returns what json.Marshal(checkpointInfo{Entries: s.pods})
// returns, byte for byte (the checksum is over these bytes), from each
// record's member (its key, a colon, its value), encoded once per record:
// a write at N pods no longer encodes all N records (json sorts map keys;
// a key is a JSON string). It is built in one allocation of its size.
func (s *Store) encodeEntries() (string, error) {
	if len(s.pods) == 0 {
		return "{}", nil
	}
	uids := slices.Sorted(maps.Keys(s.pods))
	size := len(`{"entries":{}}`)
	for _, uid := range uids {
		member, ok := s.encoded[uid]
		if !ok {
			key, err := json.Marshal(string(uid))
			if err != nil {
				return "", err
			}
			value, err := json.Marshal(s.pods[uid])
			if err != nil {
				return "", err
			}
			member = append(append(key, ':'), value...)
			s.encoded[uid] = member
		}
		size += len(member) + 1
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(`{"entries":{`)
	for i, uid := range uids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(s.encoded[uid])
	}
	b.WriteString("}}")
	return b.String(), nil
}
