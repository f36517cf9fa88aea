package pleg

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// Cache holds the newest runtime status of every pod, stamped with the time
// it was read. It is safe for concurrent use.
type Cache struct {
	mu sync.Mutex
	// pods maps a pod to its newest entry.
	pods map[types.UID]cacheEntry
	// global is a time before which every pod's entry is known to be
	// current: the start of the last complete relist.
	global time.Time
	// waiting holds, by pod, the GetNewerThan calls that wait. A Set
	// wakes only its pod's, and UpdateTime only those its time satisfies:
	// with every pod's worker waiting on the cache, waking them all at
	// each Set made a burst of N pod starts wake N goroutines N times.
	waiting map[types.UID][]*waiter
}

// waiter is one GetNewerThan call waiting for an entry read after min;
// ready is closed (and the waiter dropped from Cache.waiting) when there
// is one.
type waiter struct {
	min   time.Time
	ready chan struct{}
}

type cacheEntry struct {
	status   *nodekit.PodStatus
	err      error
	modified time.Time
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{pods: map[types.UID]cacheEntry{}, waiting: map[types.UID][]*waiter{}}
}

// Get returns the newest status of a pod, or an empty status (and no error)
// for a pod the runtime does not know. The status is shared: callers must
// not modify it.
func (c *Cache) Get(uid types.UID) (*nodekit.PodStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getLocked(uid)
}

func (c *Cache) getLocked(uid types.UID) (*nodekit.PodStatus, error) {
	e, ok := c.pods[uid]
	if !ok {
		return &nodekit.PodStatus{ID: uid}, nil
	}
	return e.status, e.err
}

// GetNewerThan blocks until the cache holds a status of the pod read after
// min — either the pod's own entry or a whole relist that started after min
// — and returns it. It returns ctx.Err() when ctx ends first.
func (c *Cache) GetNewerThan(ctx context.Context, uid types.UID, min time.Time) (*nodekit.PodStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.newerLocked(uid, min) {
		w := &waiter{min: min, ready: make(chan struct{})}
		c.waiting[uid] = append(c.waiting[uid], w)
		c.mu.Unlock()
		select {
		case <-w.ready:
			c.mu.Lock()
		case <-ctx.Done():
			c.mu.Lock()
			c.dropLocked(uid, w)
			return nil, ctx.Err()
		}
	}
	return c.getLocked(uid)
}

// newerLocked reports whether the cache holds a status of the pod read
// after min: its own entry, or a whole relist that started after min.
func (c *Cache) newerLocked(uid types.UID, min time.Time) bool {
	e, ok := c.pods[uid]
	return (ok && e.modified.After(min)) || c.global.After(min)
}

// dropLocked forgets w, which no longer waits.
func (c *Cache) dropLocked(uid types.UID, w *waiter) {
	ws := slices.DeleteFunc(c.waiting[uid], func(o *waiter) bool { return o == w })
	if len(ws) == 0 {
		delete(c.waiting, uid)
		return
	}
	c.waiting[uid] = ws
}

// Set records the status (or the error reading it) of a pod, read at t. An
// older write than the one held is ignored.
func (c *Cache) Set(uid types.UID, status *nodekit.PodStatus, err error, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.pods[uid]; ok && e.modified.After(t) {
		return
	}
	c.pods[uid] = cacheEntry{status: status, err: err, modified: t}
	c.wakeLocked(uid)
}

// Delete forgets a pod.
func (c *Cache) Delete(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, uid)
}

// UpdateTime says that every entry is current as of t (called after a
// complete relist that started at t).
func (c *Cache) UpdateTime(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.global) {
		c.global = t
		for uid := range c.waiting {
			c.wakeLocked(uid)
		}
	}
}

// wakeLocked wakes the pod's waiters that the cache now satisfies.
func (c *Cache) wakeLocked(uid types.UID) {
	ws := slices.DeleteFunc(c.waiting[uid], func(w *waiter) bool {
		if !c.newerLocked(uid, w.min) {
			return false
		}
		close(w.ready)
		return true
	})
	if len(ws) == 0 {
		delete(c.waiting, uid)
		return
	}
	c.waiting[uid] = ws
}
