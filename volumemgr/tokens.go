package volumemgr

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// maxTokenAge: a token older than this is replaced whatever its
	// lifetime, as upstream.
	maxTokenAge = 24 * time.Hour
	// tokenRetryDelay spaces the attempts to replace a token whose refresh
	// failed while the old one is still valid.
	tokenRetryDelay = 10 * time.Second
	// refreshPercent: a token is replaced once this much of its lifetime is
	// left (so at 80% of it), as upstream.
	refreshPercent = 20
)

// tokenCache keeps the service-account tokens of projected volumes and
// replaces each one at 80% of its lifetime. Unlike upstream it adds no
// random jitter, so refreshes happen at predictable times.
type tokenCache struct {
	req   TokenRequester
	clock clock.PassiveClock

	mu      sync.Mutex
	entries map[string]*tokenEntry
}

type tokenEntry struct {
	tr      *authenticationv1.TokenRequest
	retryAt time.Time // after a failed refresh
}

func newTokenCache(req TokenRequester, clk clock.PassiveClock) *tokenCache {
	return &tokenCache{req: req, clock: clk, entries: map[string]*tokenEntry{}}
}

// get returns a valid token for the request and when it should be asked for
// again. It calls the API server when there is no token yet or the cached
// one is due for refresh; a failed refresh keeps serving the old token
// until it expires. The returned object is shared: do not change it.
func (c *tokenCache) get(ctx context.Context, namespace, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, time.Time, error) {
	key := tokenKey(namespace, sa, req)
	now := c.clock.Now()
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e != nil && now.Before(c.nextAttempt(e)) {
		return e.tr, c.nextAttempt(e), nil
	}
	tr, err := c.req.CreateToken(ctx, namespace, sa, req.DeepCopy())
	if err == nil && (tr == nil || tr.Status.Token == "") {
		err = fmt.Errorf("the API server returned no token")
	}
	if err != nil {
		switch {
		case e == nil:
			return nil, time.Time{}, fmt.Errorf("failed to fetch token: %w", err)
		case !now.Before(e.tr.Status.ExpirationTimestamp.Time):
			return nil, time.Time{}, fmt.Errorf("token for service account %s/%s expired and refresh failed: %w", namespace, sa, err)
		}
		klog.FromContext(ctx).Error(err, "Unable to refresh a service account token; keeping the current one", "namespace", namespace, "serviceAccount", sa)
		c.mu.Lock()
		e.retryAt = now.Add(tokenRetryDelay)
		c.mu.Unlock()
		return e.tr, c.nextAttempt(e), nil
	}
	if tr.Spec.ExpirationSeconds == nil {
		tr = tr.DeepCopy()
		tr.Spec.ExpirationSeconds = req.Spec.ExpirationSeconds
	}
	e = &tokenEntry{tr: tr}
	c.mu.Lock()
	c.entries[key] = e
	c.mu.Unlock()
	return tr, c.nextAttempt(e), nil
}

// nextAttempt is when the entry's token should be replaced: at 80% of its
// lifetime (or at 24 h of age), or later after a failed attempt.
func (c *tokenCache) nextAttempt(e *tokenEntry) time.Time {
	at := refreshTime(e.tr)
	if e.retryAt.After(at) {
		return e.retryAt
	}
	return at
}

// refreshTime is 80% into the token's lifetime, capped at 24 h of age. A
// token without a lifetime is replaced when it expires.
func refreshTime(tr *authenticationv1.TokenRequest) time.Time {
	exp := tr.Status.ExpirationTimestamp.Time
	if tr.Spec.ExpirationSeconds == nil || *tr.Spec.ExpirationSeconds <= 0 {
		return exp
	}
	ttl := *tr.Spec.ExpirationSeconds
	issued := exp.Add(-time.Duration(ttl) * time.Second)
	at := exp.Add(-time.Duration(ttl*refreshPercent/100) * time.Second)
	if limit := issued.Add(maxTokenAge); limit.Before(at) {
		return limit
	}
	return at
}

// forgetPod drops the tokens bound to the pod.
func (c *tokenCache) forgetPod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if ref := e.tr.Spec.BoundObjectRef; ref != nil && ref.UID == uid {
			delete(c.entries, k)
		}
	}
}

// gc drops expired tokens.
func (c *tokenCache) gc() {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if now.After(e.tr.Status.ExpirationTimestamp.Time) {
			delete(c.entries, k)
		}
	}
}

// tokenKey identifies a token by everything that shapes it.
func tokenKey(namespace, sa string, req *authenticationv1.TokenRequest) string {
	var exp int64
	if req.Spec.ExpirationSeconds != nil {
		exp = *req.Spec.ExpirationSeconds
	}
	var ref authenticationv1.BoundObjectReference
	if req.Spec.BoundObjectRef != nil {
		ref = *req.Spec.BoundObjectRef
	}
	return fmt.Sprintf("%q/%q/%q/%d/%s/%s/%s/%s", namespace, sa, req.Spec.Audiences, exp, ref.Kind, ref.Name, ref.UID, req.UID)
}

// CachedTokens wraps req in the cache projected volumes use: a token is
// reused until it is due for refresh (80% of its lifetime, at most 24 h),
// and a failed refresh keeps serving the old one while it is valid, as
// upstream's token manager serves every kubelet caller. The CSI plugin's
// tokenRequests go through it. The tokens it returns are shared: callers
// must not change them.
func CachedTokens(req TokenRequester, clk clock.PassiveClock) TokenRequester {
	c := newTokenCache(req, clk)
	return TokenRequesterFunc(func(ctx context.Context, namespace, sa string, r *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
		tr, _, err := c.get(ctx, namespace, sa, r)
		return tr, err
	})
}
