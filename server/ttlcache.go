package server

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// defaultCacheEntries bounds the token and authorization caches.
const defaultCacheEntries = 8192

// ttlCache is a bounded map whose entries expire, on an injected clock.
// It is safe for concurrent use.
type ttlCache[V any] struct {
	clock clock.PassiveClock
	max   int

	mu      sync.Mutex
	entries map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	value   V
	expires time.Time
}

func newTTLCache[V any](clk clock.PassiveClock, max int) *ttlCache[V] {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if max <= 0 {
		max = defaultCacheEntries
	}
	return &ttlCache[V]{clock: clk, max: max, entries: map[string]ttlEntry[V]{}}
}

// get returns the value stored under key if it has not expired.
func (c *ttlCache[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		var zero V
		return zero, false
	}
	if !c.clock.Now().Before(e.expires) {
		delete(c.entries, key)
		var zero V
		return zero, false
	}
	return e.value, true
}

// set stores value under key for ttl. A non-positive ttl stores nothing.
// When the cache is full, expired entries are dropped first, then the
// entry closest to expiry.
func (c *ttlCache[V]) set(key string, value V, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.max {
		var soonest string
		var soonestAt time.Time
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
				continue
			}
			if soonest == "" || e.expires.Before(soonestAt) {
				soonest, soonestAt = k, e.expires
			}
		}
		if len(c.entries) >= c.max {
			delete(c.entries, soonest)
		}
	}
	c.entries[key] = ttlEntry[V]{value: value, expires: now.Add(ttl)}
}

func (c *ttlCache[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
