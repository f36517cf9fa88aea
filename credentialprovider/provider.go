package credentialprovider

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	kubeletv1 "k8s.io/kubelet/config/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	credv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"k8s.io/utils/clock"
)

const (
	// globalCacheKey is the cache key of cacheKeyType Global.
	globalCacheKey = "<global>"
	// purgeInterval is how often expired entries are dropped, as kubelet.
	purgeInterval = 15 * time.Minute
)

// provider is one configured plugin with its cache. Safe for concurrent
// use.
type provider struct {
	name         string
	matchImages  []string
	defaultCache time.Duration
	plugin       *execPlugin
	clock        clock.PassiveClock
	sa           *saProvider // nil without tokenAttributes

	mu        sync.Mutex
	cache     map[string]cacheEntry // by image, registry or globalCacheKey
	inflight  map[string]*flight    // by image (and token and annotations)
	lastPurge time.Time
}

type cacheEntry struct {
	auth    map[string]Credential
	expires time.Time
}

// flight is a run of the plugin that concurrent requests for the same
// image wait on instead of running it again.
type flight struct {
	done    chan struct{}
	auth    map[string]Credential
	err     error
	waiters int // requests that joined the run (p.mu)
}

// allowed reports whether the provider is asked about image.
func (p *provider) allowed(image string) bool {
	for _, m := range p.matchImages {
		if Match(m, image) {
			return true
		}
	}
	return false
}

// provide returns the provider's docker config for image pulled for pod
// (nil when its matchImages do not match, or when the provider wants a
// service account the pod lacks): from the cache, from a run in progress
// for the same image (and token), or from a new run. With tokenAttributes
// the pod's service account is read and a token requested first; the
// account is returned with the answer (nil without one). It blocks while
// the plugin runs or until ctx is done. The returned map must not be
// modified.
func (p *provider) provide(ctx context.Context, image string, pod *v1.Pod) (map[string]Credential, *kubeletv1beta1.ImagePullServiceAccount, error) {
	if !p.allowed(image) {
		return nil, nil, nil
	}
	sa := &saRequest{}
	if p.sa != nil {
		var err error
		if sa, err = p.sa.request(ctx, pod); errors.Is(err, errSkip) {
			return nil, nil, nil
		} else if err != nil {
			return nil, nil, err
		}
	}
	flightKey := image
	if sa.flightKey != "" {
		flightKey = joinKey(image, sa.flightKey)
	}
	p.mu.Lock()
	if auth, ok := p.cached(image, sa.cacheKey); ok {
		p.mu.Unlock()
		return auth, sa.account, nil
	}
	f, running := p.inflight[flightKey]
	if !running {
		f = &flight{done: make(chan struct{})}
		p.inflight[flightKey] = f
		// The run outlives the first asker's cancellation (others may be
		// waiting on it); execTimeout bounds it.
		go p.fly(context.WithoutCancel(ctx), image, flightKey, sa, f)
	} else {
		f.waiters++
	}
	p.mu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return nil, nil, f.err
		}
		return f.auth, sa.account, nil
	case <-ctx.Done():
		return nil, nil, context.Cause(ctx)
	}
}

// cacheKey is a base key (image, registry or global) with the service
// account's part, if any.
func cacheKey(base, sa string) string {
	if sa == "" {
		return base
	}
	return joinKey(base, sa)
}

// cached looks image up under its image, registry and global keys (each
// with the service account's part). p.mu is held.
func (p *provider) cached(image, sa string) (map[string]Credential, bool) {
	now := p.clock.Now()
	if now.Sub(p.lastPurge) >= purgeInterval {
		for k, e := range p.cache {
			if now.After(e.expires) {
				delete(p.cache, k)
			}
		}
		p.lastPurge = now
	}
	for _, k := range []string{image, registryOf(image), globalCacheKey} {
		if e, ok := p.cache[cacheKey(k, sa)]; ok && !now.After(e.expires) {
			return e.auth, true
		}
	}
	return nil, false
}

// fly runs the plugin, caches its answer and releases the waiters; the
// cache entry and the end of the flight are one step under p.mu, so a
// later request finds one or the other.
func (p *provider) fly(ctx context.Context, image, flightKey string, sa *saRequest, f *flight) {
	resp, err := p.plugin.run(ctx, image, sa.token, sa.annotations)
	var key string
	var expires time.Time
	if err == nil {
		f.auth, key, expires, err = p.digest(image, resp)
	}
	if err == nil && sa.token != "" && p.sa.attrs.CacheType != kubeletv1.TokenServiceAccountTokenCacheType {
		for _, a := range f.auth {
			if a.Password == sa.token {
				err = errors.New("credential provider plugin returned the service account token as the password which is not allowed when service account cache type is not set to 'Token'")
			}
		}
	}
	if err != nil {
		f.err = fmt.Errorf("failed to get credential from external registry credential provider: %w", err)
		f.auth = nil
	}
	p.mu.Lock()
	if err == nil && key != "" {
		p.cache[cacheKey(key, sa.cacheKey)] = cacheEntry{auth: f.auth, expires: expires}
	}
	delete(p.inflight, flightKey)
	p.mu.Unlock()
	close(f.done)
}

// digest turns a response into a docker config, its cache key ("" when
// the answer is not to be cached) and its expiry.
func (p *provider) digest(image string, resp *credv1.CredentialProviderResponse) (map[string]Credential, string, time.Time, error) {
	var key string
	switch resp.CacheKeyType {
	case credv1.ImagePluginCacheKeyType:
		key = image
	case credv1.RegistryPluginCacheKeyType:
		key = registryOf(image)
	case credv1.GlobalPluginCacheKeyType:
		key = globalCacheKey
	default:
		return nil, "", time.Time{}, fmt.Errorf("credential provider plugin did not return a valid cacheKeyType: %s", resp.CacheKeyType)
	}
	auth := make(map[string]Credential, len(resp.Auth))
	for pattern, a := range resp.Auth {
		auth[pattern] = Credential{Username: a.Username, Password: a.Password}
	}
	ttl := p.defaultCache
	if resp.CacheDuration != nil {
		ttl = resp.CacheDuration.Duration
	}
	if ttl <= 0 {
		return auth, "", time.Time{}, nil
	}
	return auth, key, p.clock.Now().Add(ttl), nil
}
