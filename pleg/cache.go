package pleg

import (
	"context"
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
	// changed is closed and replaced whenever anything is set.
	changed chan struct{}
}

type cacheEntry struct {
	status   *nodekit.PodStatus
	err      error
	modified time.Time
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{pods: map[types.UID]cacheEntry{}, changed: make(chan struct{})}
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
	for {
		c.mu.Lock()
		e, ok := c.pods[uid]
		if (ok && e.modified.After(min)) || c.global.After(min) {
			st, err := c.getLocked(uid)
			c.mu.Unlock()
			return st, err
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
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
	c.notifyLocked()
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
		c.notifyLocked()
	}
}

func (c *Cache) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}
