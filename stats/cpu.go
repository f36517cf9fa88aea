package stats

import (
	"sync"
	"time"
)

// CPUSample is a cumulative CPU-time reading.
type CPUSample struct {
	// UsageCoreNanoSeconds is the cumulative CPU time.
	UsageCoreNanoSeconds uint64
	// At is when it was read.
	At time.Time
}

// NanoCores is the CPU rate between two samples, in nanocores (1e9 = one
// core fully busy). It is false when the samples are not in time order or
// the counter went backwards (the container was replaced).
func NanoCores(prev, cur CPUSample) (uint64, bool) {
	d := cur.At.Sub(prev.At)
	if d <= 0 || cur.UsageCoreNanoSeconds < prev.UsageCoreNanoSeconds {
		return 0, false
	}
	delta := cur.UsageCoreNanoSeconds - prev.UsageCoreNanoSeconds
	return uint64(float64(delta) / float64(d.Nanoseconds()) * 1e9), true
}

// cpuRates turns cumulative readings into rates, per key (node, pod,
// container). A reading taken less than minInterval after the stored one
// returns the stored rate, so frequent callers (a metrics scrape right
// after the eviction manager) do not get noisy rates.
type cpuRates struct {
	minInterval time.Duration

	mu   sync.Mutex
	last map[string]cpuRate
	seen map[string]bool
}

type cpuRate struct {
	sample CPUSample
	rate   uint64
	valid  bool
}

// rate records cur for key and returns the rate, if one can be computed.
func (c *cpuRates) rate(key string, cur CPUSample) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last, c.seen = map[string]cpuRate{}, map[string]bool{}
	}
	c.seen[key] = true
	prev, ok := c.last[key]
	if ok && cur.At.Sub(prev.sample.At) < c.minInterval && cur.UsageCoreNanoSeconds >= prev.sample.UsageCoreNanoSeconds {
		return prev.rate, prev.valid
	}
	next := cpuRate{sample: cur}
	if ok {
		next.rate, next.valid = NanoCores(prev.sample, cur)
	}
	c.last[key] = next
	return next.rate, next.valid
}

// sweep forgets keys not used since the previous sweep.
func (c *cpuRates) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.last {
		if !c.seen[k] {
			delete(c.last, k)
		}
	}
	c.seen = map[string]bool{}
}
