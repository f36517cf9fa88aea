package userns

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// DefaultIDsPerPod is the length of a pod's range when Config.IDsPerPod is
// 0, as upstream's userNamespaces.idsPerPod default.
const DefaultIDsPerPod = 65536

// FileName is the checkpoint file in each pod's directory.
const FileName = "userns"

// Config configures an Allocator. Only PodsDir is required.
type Config struct {
	// PodsDir holds one directory per pod named by its UID
	// (ROOT-DIR/pods); each allocation is written to PodsDir/UID/userns.
	PodsDir string
	// IDsPerPod is the length of every pod's range, a multiple of 65536;
	// 0 means DefaultIDsPerPod.
	IDsPerPod uint32
	// FirstID and Length are the node's range (NodeRange finds it as
	// upstream does: the kubelet user's subordinate IDs). Both 0 means
	// upstream's default: from IDsPerPod to 2^32-1. FirstID must be a
	// non-zero multiple of IDsPerPod and Length a multiple of IDsPerPod.
	FirstID, Length uint32
	// MaxPods, when above 0, is how many ranges the node's range must hold
	// (upstream refuses to start otherwise).
	MaxPods int
	// Pick returns where the search for a free range starts, in [0, n).
	// Nil picks uniformly at random, as upstream does, so that a pod's host
	// IDs cannot be predicted from the order pods started in. Tests set it
	// to get a fixed order.
	Pick func(n int) int
}

// sizes are IDsPerPod, FirstID and Length with the defaults applied.
func (cfg Config) sizes() (per, first, length uint32) {
	per = cfg.IDsPerPod
	if per == 0 {
		per = DefaultIDsPerPod
	}
	first, length = cfg.FirstID, cfg.Length
	if first == 0 && length == 0 {
		first, length = per, uint32((1<<32)-uint64(per))
	}
	return per, first, length
}

// Validate checks the ranges as upstream kubelet does when it creates its
// user namespace manager at start, in its words: IDsPerPod a multiple of
// 65536; the node's range starting at a non-zero multiple of IDsPerPod (so
// host root is never mapped), its length a multiple of IDsPerPod, room for
// MaxPods pods, and (beyond upstream) ending by 2^32. It reads nothing.
func (cfg Config) Validate() error {
	per, first, length := cfg.sizes()
	switch {
	case per%DefaultIDsPerPod != 0:
		return fmt.Errorf("userns: kubelet user namespace length %d is not a multiple of %d", per, DefaultIDsPerPod)
	case first%per != 0:
		return fmt.Errorf("userns: kubelet user assigned ID %d is not a multiple of %d", first, per)
	case first < per:
		// ID 0 on the host must never be mapped into a pod.
		return fmt.Errorf("userns: kubelet user assigned ID %d must be greater or equal to %d", first, per)
	case length%per != 0:
		return fmt.Errorf("userns: kubelet user assigned IDs length %d is not a multiple of %d", length, per)
	case cfg.MaxPods > 0 && int(length/per) < cfg.MaxPods:
		return fmt.Errorf("userns: kubelet user assigned IDs are not enough to support %d pods", cfg.MaxPods)
	case uint64(first)+uint64(length) > 1<<32:
		return fmt.Errorf("userns: range %d+%d goes past 2^32", first, length)
	}
	return nil
}

// Mapping is a pod's range: container IDs 0..Length-1 (UIDs and GIDs
// alike) are host IDs HostID..HostID+Length-1.
type Mapping struct {
	HostID uint32
	Length uint32
}

// Allocator hands out one range per pod. Its methods are safe for
// concurrent use.
type Allocator struct {
	mu     sync.Mutex
	dir    string
	perPod uint32
	first  uint32 // slot 0's index in units of perPod
	used   []bool // by slot
	byPod  map[types.UID]uint32
	pick   func(n int) int // where the search for a free slot starts
}

// New validates cfg and reads the allocations checkpointed under PodsDir.
// A checkpoint it cannot read or that clashes with another is an error
// naming the pod: handing its range out again could let two pods share IDs.
func New(cfg Config) (*Allocator, error) {
	if cfg.PodsDir == "" {
		return nil, errors.New("userns: Config.PodsDir is empty")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	per, first, length := cfg.sizes()
	a := &Allocator{dir: cfg.PodsDir, perPod: per, first: first / per, used: make([]bool, length/per), byPod: map[types.UID]uint32{}, pick: cfg.Pick}
	if a.pick == nil {
		a.pick = rand.IntN
	}
	entries, err := os.ReadDir(cfg.PodsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("userns: read %s: %w", cfg.PodsDir, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		uid := types.UID(e.Name())
		m, ok, err := a.read(uid)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if err := a.record(uid, m); err != nil {
			return nil, fmt.Errorf("userns: pod %s: %w", uid, err)
		}
	}
	return a, nil
}

// Get returns the pod's range, allocating and checkpointing one the first
// time. It reads and writes the pod's directory (created if missing). It
// fails when the node's range is exhausted.
func (a *Allocator) Get(uid types.UID) (Mapping, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.byPod[uid]; ok {
		// The pod still asks, so it still holds the range: put back a
		// checkpoint removed with its directory, or reclaim would free it.
		m := a.mapping(s)
		if _, err := os.Stat(a.file(uid)); errors.Is(err, fs.ErrNotExist) {
			if err := a.write(uid, m); err != nil {
				return Mapping{}, err
			}
		}
		return m, nil
	}
	if m, ok, err := a.read(uid); err != nil {
		return Mapping{}, err
	} else if ok {
		if err := a.record(uid, m); err != nil {
			return Mapping{}, fmt.Errorf("userns: pod %s: %w", uid, err)
		}
		return m, nil
	}
	a.reclaim()
	// From a random slot onwards, wrapping round: the first free one.
	slot, start := -1, a.pick(len(a.used))
	for i := range a.used {
		if j := (start + i) % len(a.used); !a.used[j] {
			slot = j
			break
		}
	}
	if slot < 0 {
		return Mapping{}, errors.New("userns: could not find an empty slot to allocate a user namespace")
	}
	m := a.mapping(uint32(slot))
	if err := a.write(uid, m); err != nil {
		return Mapping{}, err
	}
	a.used[slot], a.byPod[uid] = true, uint32(slot)
	return m, nil
}

// Release frees the pod's range and removes its checkpoint. Releasing a
// pod without a range does nothing.
func (a *Allocator) Release(uid types.UID) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.release(uid)
}

// Cleanup releases the range of every pod active does not report, as
// upstream's orphan cleanup; call it once all pod sources are known.
func (a *Allocator) Cleanup(active func(types.UID) bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, uid := range a.pods() {
		if !active(uid) {
			errs = append(errs, a.release(uid))
		}
	}
	return errors.Join(errs...)
}

// Allocated returns the pods holding a range, with their ranges.
func (a *Allocator) Allocated() map[types.UID]Mapping {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[types.UID]Mapping, len(a.byPod))
	for uid, s := range a.byPod {
		out[uid] = a.mapping(s)
	}
	return out
}

func (a *Allocator) pods() []types.UID {
	out := make([]types.UID, 0, len(a.byPod))
	for uid := range a.byPod {
		out = append(out, uid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (a *Allocator) release(uid types.UID) error {
	s, ok := a.byPod[uid]
	if !ok {
		return nil
	}
	delete(a.byPod, uid)
	a.used[s] = false
	if err := os.Remove(a.file(uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("userns: release pod %s: %w", uid, err)
	}
	return nil
}

// reclaim frees the ranges of pods whose checkpoint is gone (their pod
// directory was removed after they terminated).
func (a *Allocator) reclaim() {
	for _, uid := range a.pods() {
		if _, err := os.Stat(a.file(uid)); errors.Is(err, fs.ErrNotExist) {
			a.used[a.byPod[uid]] = false
			delete(a.byPod, uid)
		}
	}
}

func (a *Allocator) mapping(slot uint32) Mapping {
	return Mapping{HostID: (a.first + slot) * a.perPod, Length: a.perPod}
}

// record marks m as the pod's, checking it is a range this allocator could
// have handed out and that no other pod holds it.
func (a *Allocator) record(uid types.UID, m Mapping) error {
	if m.Length != a.perPod {
		return fmt.Errorf("wrong user namespace length %d, want %d", m.Length, a.perPod)
	}
	if m.HostID%a.perPod != 0 {
		return fmt.Errorf("wrong user namespace offset %d", m.HostID)
	}
	idx := int64(m.HostID/a.perPod) - int64(a.first)
	if idx < 0 || idx >= int64(len(a.used)) {
		return fmt.Errorf("host ID %d is outside the node's range", m.HostID)
	}
	if prev, ok := a.byPod[uid]; ok {
		if prev != uint32(idx) {
			return fmt.Errorf("pod already holds another range")
		}
		return nil
	}
	if a.used[idx] {
		return fmt.Errorf("range at host ID %d is already taken by another pod", m.HostID)
	}
	a.used[idx], a.byPod[uid] = true, uint32(idx)
	return nil
}

func (a *Allocator) file(uid types.UID) string { return filepath.Join(a.dir, string(uid), FileName) }
