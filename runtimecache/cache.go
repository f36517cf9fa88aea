package runtimecache

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// DefaultMaxAge is how old a listing Cache serves: two relist periods.
const DefaultMaxAge = 2 * time.Second

// Lister lists the runtime's pods (nodekit.Runtime.ListPods).
type Lister interface {
	ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error)
}

// Config configures a Cache.
type Config struct {
	// Runtime answers when the kept listing is too old.
	Runtime Lister
	// MaxAge is the age past which a listing is not served; 0 is
	// DefaultMaxAge.
	MaxAge time.Duration
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
}

// Cache serves the runtime's pods from the newest full listing.
type Cache struct {
	cfg Config

	mu   sync.Mutex
	pods []*nodekit.Pod // a full listing (all=true)
	at   time.Time      // when the listing started; zero before the first
}

// New returns an empty Cache.
func New(cfg Config) *Cache {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Cache{cfg: cfg}
}

// Observe keeps pods, a full listing (all sandboxes and containers) that
// started at at, unless a newer one is kept. The caller must not change
// pods afterwards; pleg.Options.OnList has that contract.
func (c *Cache) Observe(pods []*nodekit.Pod, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.Before(c.at) {
		return
	}
	c.pods, c.at = pods, at
}

// ListPods implements Lister: the kept listing while it is no older than
// MaxAge, else a new full listing from the runtime, kept for the next
// reader. With all=false only running sandboxes and containers are
// returned, and pods with neither are left out, as the runtime's own
// ListPods(ctx, false).
func (c *Cache) ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error) {
	pods, ok := c.fresh()
	if !ok {
		start := c.cfg.Clock.Now()
		var err error
		if pods, err = c.cfg.Runtime.ListPods(ctx, true); err != nil {
			return nil, err
		}
		c.Observe(pods, start)
	}
	return view(pods, all), nil
}

func (c *Cache) fresh() ([]*nodekit.Pod, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || c.cfg.Clock.Since(c.at) > c.cfg.MaxAge {
		return nil, false
	}
	return c.pods, true
}

// view copies pods down to their container slices, keeping only running
// sandboxes and containers unless all.
func view(pods []*nodekit.Pod, all bool) []*nodekit.Pod {
	out := make([]*nodekit.Pod, 0, len(pods))
	for _, p := range pods {
		q := *p
		q.Sandboxes, q.Containers = pick(p.Sandboxes, all), pick(p.Containers, all)
		if !all {
			if len(q.Sandboxes) == 0 && len(q.Containers) == 0 {
				continue
			}
			q.CreatedAt = time.Time{} // the newest sandbox listed, as the runtime's
			for _, sb := range q.Sandboxes {
				if sb.CreatedAt.After(q.CreatedAt) {
					q.CreatedAt = sb.CreatedAt
				}
			}
		}
		out = append(out, &q)
	}
	return out
}

func pick(cs []*nodekit.Container, all bool) []*nodekit.Container {
	if all {
		return slices.Clone(cs)
	}
	var out []*nodekit.Container
	for _, c := range cs {
		if c.State == nodekit.StateRunning {
			out = append(out, c)
		}
	}
	return out
}
