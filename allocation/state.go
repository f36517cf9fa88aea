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
// is on disk before the call that made it returns. It is safe for
// concurrent use.
//
// Changes made at once share their writes (group commit): while one
// checkpoint is written, the changes that arrive meanwhile wait, and the
// first of them writes one checkpoint holding them all; the others find
// their change already written. A pod worker's Set used to hold the
// store's lock through its own write and fsync, so a burst of pod starts
// wrote the file, fsync included, once per pod, one pod at a time. A
// change is visible to Get as soon as it is made, before it is on disk;
// one whose write fails is undone (unless changed again since) before the
// next write, and its caller gets the error.
type Store struct {
	path   string
	noSync bool
	// write replaces the file at path with data (fsutil.WriteFileSwap;
	// tests hold or fail writes through it).
	write func(path string, data []byte) error

	// mu guards the records and what is kept about their changes; it is
	// never held across a write.
	mu   sync.Mutex
	pods map[types.UID]PodResources
	// encoded holds each pod's JSON member ("uid":record), made when the
	// record is first written, so a write encodes only what changed (see
	// encodeEntries).
	encoded map[types.UID][]byte
	// seq numbers the changes; last is the number of each pod's latest
	// change, kept until that change is on disk.
	seq  uint64
	last map[types.UID]uint64

	// wmu is held while a checkpoint is written and while a failed
	// change is undone; written, guarded by it, is the number of the
	// latest change the file holds.
	wmu     sync.Mutex
	written uint64
}

// OpenStore reads the checkpoint named file under dir (a missing file is
// an empty store). An empty dir keeps the store in memory only.
func OpenStore(dir, file string) (*Store, error) {
	s := &Store{pods: map[types.UID]PodResources{}, encoded: map[types.UID][]byte{}, last: map[types.UID]uint64{}}
	s.write = func(path string, data []byte) error {
		return fsutil.WriteFileSwap(path, data, 0o600, fsutil.NoSync(s.noSync))
	}
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
	before := s.changeLocked(uid)
	s.pods[uid] = p.DeepCopy()
	n := s.seq
	s.mu.Unlock()
	return s.commit(n, []priorRecord{before})
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
	if _, ok := s.pods[uid]; !ok {
		s.mu.Unlock()
		return nil
	}
	before := s.changeLocked(uid)
	delete(s.pods, uid)
	n := s.seq
	s.mu.Unlock()
	return s.commit(n, []priorRecord{before})
}

// RemoveOrphans forgets every pod not in keep.
func (s *Store) RemoveOrphans(keep map[types.UID]bool) error {
	s.mu.Lock()
	var before []priorRecord
	for uid := range s.pods {
		if !keep[uid] {
			before = append(before, s.changeLocked(uid))
			delete(s.pods, uid)
		}
	}
	n := s.seq
	s.mu.Unlock()
	if len(before) == 0 {
		return nil
	}
	return s.commit(n, before)
}

// priorRecord is a pod's record as it was before a change (had false:
// none), and the number of that change, to undo it if its write fails.
type priorRecord struct {
	uid    types.UID
	rec    PodResources
	had    bool
	change uint64
}

// changeLocked numbers a change of the pod's record about to be made
// (s.seq is then its number) and returns the record as it was.
func (s *Store) changeLocked(uid types.UID) priorRecord {
	s.seq++
	s.last[uid] = s.seq
	delete(s.encoded, uid)
	rec, had := s.pods[uid]
	return priorRecord{uid: uid, rec: rec, had: had, change: s.seq}
}

// commit returns once the file holds change n (nil) or the write that was
// to hold it failed; then the changes listed in undo are undone, unless
// their pod changed again since, and the write's error is returned.
func (s *Store) commit(n uint64, undo []priorRecord) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.written >= n {
		return nil
	}
	err := s.writeLocked()
	if err == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range undo {
		if s.last[p.uid] != p.change {
			continue
		}
		delete(s.last, p.uid)
		// The failed write may have cached the new record's member: drop
		// it; the old one is encoded again on the next write.
		delete(s.encoded, p.uid)
		if p.had {
			s.pods[p.uid] = p.rec
		} else {
			delete(s.pods, p.uid)
		}
	}
	return err
}

// writeLocked writes the records as they are now and, once they are on
// disk, marks every change made so far written. The caller holds s.wmu.
func (s *Store) writeLocked() error {
	s.mu.Lock()
	n := s.seq
	var out []byte
	var err error
	if s.path != "" {
		out, err = s.encodeFileLocked()
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if s.path != "" {
		if err := s.write(s.path, out); err != nil {
			return fmt.Errorf("allocation: write %s: %w", s.path, err)
		}
	}
	s.written = n
	s.mu.Lock()
	for uid, c := range s.last {
		if c <= n {
			delete(s.last, uid)
		}
	}
	s.mu.Unlock()
	return nil
}

// encodeFileLocked returns the checkpoint file's bytes for the records.
func (s *Store) encodeFileLocked() ([]byte, error) {
	data, err := s.encodeEntries()
	if err != nil {
		return nil, fmt.Errorf("allocation: encode %s: %w", s.path, err)
	}
	out, err := json.Marshal(checkpointFile{Data: data, Checksum: ckpt.Checksum(data)})
	if err != nil {
		return nil, fmt.Errorf("allocation: encode %s: %w", s.path, err)
	}
	return out, nil
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
