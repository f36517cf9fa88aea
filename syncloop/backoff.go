package syncloop

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// backoff tracks exponential back-off per key (a container or an image):
// the first failure waits initial, each later one twice as long up to max.
// An entry untouched for 2*max is forgotten, so a long-healthy container
// starts again from initial.
type backoff struct {
	clock        clock.PassiveClock
	initial, max time.Duration

	mu      sync.Mutex
	entries map[string]*backoffEntry
}

type backoffEntry struct {
	delay      time.Duration
	lastUpdate time.Time
}

func newBackoff(clk clock.PassiveClock, initial, max time.Duration) *backoff {
	return &backoff{clock: clk, initial: initial, max: max, entries: map[string]*backoffEntry{}}
}

// Next records a failure (or a restart) now and grows the delay.
func (b *backoff) Next(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	e, ok := b.entries[key]
	if !ok || now.Sub(e.lastUpdate) > 2*b.max {
		b.entries[key] = &backoffEntry{delay: b.initial, lastUpdate: now}
		return
	}
	e.delay = min(2*e.delay, b.max)
	e.lastUpdate = now
}

// InBackoffSince reports whether the delay counted from since has not
// passed yet, and how long remains.
func (b *backoff) InBackoffSince(key string, since time.Time) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok {
		return false, 0
	}
	now := b.clock.Now()
	if now.Sub(e.lastUpdate) > 2*b.max {
		return false, 0
	}
	left := e.delay - now.Sub(since)
	return left > 0, left
}

// InBackoff reports whether the delay counted from the last Next has not
// passed yet (image pulls: measured from the last failure), and how long
// remains.
func (b *backoff) InBackoff(key string) (bool, time.Duration) {
	b.mu.Lock()
	e, ok := b.entries[key]
	b.mu.Unlock()
	if !ok {
		return false, 0
	}
	return b.InBackoffSince(key, e.lastUpdate)
}

// Delay returns the current delay of a key (0 when none).
func (b *backoff) Delay(key string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[key]; ok {
		return e.delay
	}
	return 0
}

// Reset forgets a key.
func (b *backoff) Reset(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.entries, key)
}

// GC forgets entries untouched for 2*max.
func (b *backoff) GC() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	for k, e := range b.entries {
		if now.Sub(e.lastUpdate) > 2*b.max {
			delete(b.entries, k)
		}
	}
}
