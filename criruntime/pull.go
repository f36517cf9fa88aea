package criruntime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// ErrPullQPSExceeded is the error of a pull refused by the registry pull
// rate limit (Config.PullQPS). Its text is upstream's.
var ErrPullQPSExceeded = errors.New("pull QPS exceeded")

// puller carries out image pulls under the node's pull policy: one at a
// time or a bounded number at once, a start-rate limit and a deadline per
// pull.
type puller struct {
	// slots holds one token per pull in progress; nil means no limit.
	// Goroutines blocked sending on a channel are served in arrival order,
	// so serialized pulls run first come, first served.
	slots    chan struct{}
	bucket   *tokenBucket // nil: no rate limit
	deadline time.Duration
	clock    clock.PassiveClock
}

// newPuller checks the pull fields of cfg (defaults already applied) and
// builds the puller they describe.
func newPuller(cfg Config) (*puller, error) {
	// Unset, it follows upstream's defaulting: serialized unless
	// MaxParallelImagePulls asks for two or more.
	serialize := cfg.MaxParallelImagePulls < 2
	if cfg.SerializeImagePulls != nil {
		serialize = *cfg.SerializeImagePulls
	}
	switch {
	case cfg.MaxParallelImagePulls < 0:
		return nil, fmt.Errorf("criruntime: Config.MaxParallelImagePulls is %d, must not be negative", cfg.MaxParallelImagePulls)
	case serialize && cfg.MaxParallelImagePulls > 1:
		return nil, fmt.Errorf("criruntime: Config.MaxParallelImagePulls is %d, but Config.SerializeImagePulls is true; it cannot be larger than 1 unless SerializeImagePulls is false", cfg.MaxParallelImagePulls)
	case cfg.PullQPS < 0:
		return nil, fmt.Errorf("criruntime: Config.PullQPS is %v, must not be negative", cfg.PullQPS)
	case cfg.PullBurst < 0:
		return nil, fmt.Errorf("criruntime: Config.PullBurst is %d, must not be negative", cfg.PullBurst)
	case cfg.PullDeadline < 0:
		return nil, fmt.Errorf("criruntime: Config.PullDeadline is %v, must not be negative", cfg.PullDeadline)
	}
	p := &puller{deadline: cfg.PullDeadline, clock: cfg.Clock}
	switch {
	case serialize:
		p.slots = make(chan struct{}, 1)
	case cfg.MaxParallelImagePulls > 0:
		p.slots = make(chan struct{}, cfg.MaxParallelImagePulls)
	}
	if cfg.PullQPS > 0 {
		p.bucket = newTokenBucket(float64(cfg.PullQPS), max(cfg.PullBurst, 1), cfg.Clock)
	}
	return p, nil
}

// pulled is the outcome of a successful pull.
type pulled struct {
	image *runtimeapi.Image
	// took is the pull itself plus the size lookup, without the time
	// spent waiting for a turn.
	took time.Duration
	// cred is the index of the credential that pulled; -1: anonymous.
	cred int
}

// pullImage waits for a pull slot, takes a rate-limit token, then pulls
// under the pull deadline and looks the image up for its size.
func (r *Runtime) pullImage(ctx context.Context, spec *runtimeapi.ImageSpec, creds []*runtimeapi.AuthConfig, sandbox *runtimeapi.PodSandboxConfig) (*pulled, error) {
	p := r.pulls
	if p.slots != nil {
		select {
		case p.slots <- struct{}{}:
			defer func() { <-p.slots }()
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a turn to pull: %w", context.Cause(ctx))
		}
	}
	if p.bucket != nil && !p.bucket.take() {
		return nil, ErrPullQPSExceeded
	}
	start := p.clock.Now()
	pctx := ctx
	if p.deadline > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, p.deadline)
		defer cancel()
	}
	ref, cred, err := r.pull(pctx, spec, creds, sandbox)
	if err != nil {
		if ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
			image := spec.UserSpecifiedImage
			if image == "" {
				image = spec.Image
			}
			return nil, &deadlineError{image: image, deadline: p.deadline}
		}
		return nil, err
	}
	img := &runtimeapi.Image{Id: ref}
	// The size is best effort, as upstream: a failed lookup is not a
	// failed pull.
	if st, err := r.is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false); err == nil && st.GetImage() != nil {
		img = st.GetImage()
	}
	return &pulled{image: img, took: p.clock.Since(start), cred: cred}, nil
}

// deadlineError is a pull that ran out of Config.PullDeadline; it is a
// context.DeadlineExceeded.
type deadlineError struct {
	image    string
	deadline time.Duration
}

func (e *deadlineError) Error() string {
	return fmt.Sprintf("image pull of %q exceeded deadline %v", e.image, e.deadline)
}

func (e *deadlineError) Unwrap() error { return context.DeadlineExceeded }

// tokenBucket admits up to burst events at once and refills at qps tokens
// per second. It never waits: take reports whether a token was free.
type tokenBucket struct {
	clock  clock.PassiveClock
	qps    float64
	burst  float64
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newTokenBucket(qps float64, burst int, c clock.PassiveClock) *tokenBucket {
	return &tokenBucket{clock: c, qps: qps, burst: float64(burst), tokens: float64(burst), last: c.Now()}
}

func (b *tokenBucket) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := b.clock.Now(); now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.qps)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
