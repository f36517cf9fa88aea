package credentialprovider

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletv1 "k8s.io/kubelet/config/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// ServiceAccounts reads the pod's service account and requests tokens for
// it (the TokenRequest API), for providers with tokenAttributes. A client
// with the node's credentials can: the Node authorizer allows both for the
// pods bound to the node.
type ServiceAccounts interface {
	GetServiceAccount(ctx context.Context, namespace, name string) (*v1.ServiceAccount, error)
	CreateToken(ctx context.Context, namespace, name string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// saProvider is the service-account side of a provider with
// tokenAttributes.
type saProvider struct {
	attrs  kubeletv1.ServiceAccountTokenAttributes
	sas    ServiceAccounts
	tokens *tokenCache
}

// saRequest is what one lookup sends and keys on for a pod's account.
type saRequest struct {
	token       string
	annotations map[string]string
	cacheKey    string // added to every cache key
	flightKey   string // added to the image for collapsing runs
	// account is the pod's service account the token is for; nil when
	// the provider is asked without one.
	account *kubeletv1beta1.ImagePullServiceAccount
}

// errSkip means the provider is not asked for this pod (no service
// account where one is required, or a required annotation missing), as
// kubelet: no credentials and no error.
var errSkip = errors.New("provider skipped for this pod")

// request finds the pod's service account and a token for it.
func (s *saProvider) request(ctx context.Context, pod *v1.Pod) (*saRequest, error) {
	name := pod.Spec.ServiceAccountName
	if name == "" {
		if *s.attrs.RequireServiceAccount {
			return nil, errSkip
		}
		return &saRequest{}, nil
	}
	sa, err := s.sas.GetServiceAccount(ctx, pod.Namespace, name)
	if err != nil {
		return nil, fmt.Errorf("failed to get service account: %w", err)
	}
	ann := map[string]string{}
	for _, k := range s.attrs.RequiredServiceAccountAnnotationKeys {
		v, ok := sa.Annotations[k]
		if !ok {
			return nil, errSkip
		}
		ann[k] = v
	}
	for _, k := range s.attrs.OptionalServiceAccountAnnotationKeys {
		if v, ok := sa.Annotations[k]; ok {
			ann[k] = v
		}
	}
	token, err := s.tokens.get(ctx, pod, name, sa.UID, s.attrs.ServiceAccountTokenAudience)
	if err != nil {
		return nil, fmt.Errorf("failed to get service account token: %w", err)
	}
	hash := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(token)))
	parts := []string{pod.Namespace, name, string(sa.UID), annotationsKey(ann)}
	if s.attrs.CacheType == kubeletv1.TokenServiceAccountTokenCacheType {
		parts = append(parts, "token", hash)
	}
	return &saRequest{token: token, annotations: ann, cacheKey: joinKey(parts...), flightKey: joinKey(hash, annotationsKey(ann)),
		account: &kubeletv1beta1.ImagePullServiceAccount{UID: string(sa.UID), Namespace: pod.Namespace, Name: name}}, nil
}

// joinKey joins parts unambiguously (each length-prefixed).
func joinKey(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

func annotationsKey(ann map[string]string) string {
	keys := make([]string, 0, len(ann))
	for k := range ann {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		parts = append(parts, k, ann[k])
	}
	return joinKey(parts...)
}

// tokenCache keeps a pod's token for an audience until 80% of its
// lifetime has passed, as kubelet's token manager, so that a provider
// caching per token (cacheType Token) is not asked again at each pull.
type tokenCache struct {
	sas   ServiceAccounts
	clock clock.PassiveClock

	mu     sync.Mutex
	tokens map[string]cachedToken
}

type cachedToken struct {
	token   string
	refresh time.Time
}

func (c *tokenCache) get(ctx context.Context, pod *v1.Pod, sa string, saUID types.UID, audience string) (string, error) {
	key := joinKey(string(pod.UID), sa, string(saUID), audience)
	now := c.clock.Now()
	c.mu.Lock()
	t, ok := c.tokens[key]
	c.mu.Unlock()
	if ok && now.Before(t.refresh) {
		return t.token, nil
	}
	tr, err := c.sas.CreateToken(ctx, pod.Namespace, sa, &authenticationv1.TokenRequest{
		ObjectMeta: metav1.ObjectMeta{UID: saUID},
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:      []string{audience},
			BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
		},
	})
	if err != nil {
		return "", err
	}
	refresh := now
	if exp := tr.Status.ExpirationTimestamp.Time; exp.After(now) {
		refresh = now.Add(exp.Sub(now) * 8 / 10)
	}
	c.mu.Lock()
	for k, old := range c.tokens { // drop the stale ones
		if !now.Before(old.refresh) {
			delete(c.tokens, k)
		}
	}
	c.tokens[key] = cachedToken{token: tr.Status.Token, refresh: refresh}
	c.mu.Unlock()
	return tr.Status.Token, nil
}
