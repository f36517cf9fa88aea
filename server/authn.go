package server

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// Cache defaults, as upstream kubelet's authentication.webhook.cacheTTL and
// authorization.webhook.cacheAuthorizedTTL / cacheUnauthorizedTTL.
const (
	DefaultTokenCacheTTL = 2 * time.Minute
	DefaultAllowCacheTTL = 5 * time.Minute
	DefaultDenyCacheTTL  = 30 * time.Second
)

// wsProtocolTokenPrefix carries a bearer token in a WebSocket subprotocol,
// for browsers that cannot set an Authorization header.
const wsProtocolTokenPrefix = "base64url.bearer.authorization.k8s.io."

// x509Authenticator authenticates TLS client certificates.
type x509Authenticator struct {
	roots *x509.CertPool
	clock clock.PassiveClock
}

// NewX509Authenticator authenticates callers by their TLS client
// certificate, verified against roots for client authentication: the user
// is the subject's common name, the groups its organizations (as upstream).
// A request without a client certificate is not identified (ok=false); an
// invalid certificate is an error. clk may be nil (the real clock).
func NewX509Authenticator(roots *x509.CertPool, clk clock.PassiveClock) Authenticator {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &x509Authenticator{roots: roots, clock: clk}
}

// LoadCertPool reads a PEM bundle of CA certificates, e.g. the
// KubeletConfiguration's authentication.x509.clientCAFile.
func LoadCertPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("server: client CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("server: client CA bundle %s holds no PEM certificate", file)
	}
	return pool, nil
}

func (a *x509Authenticator) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots: a.roots, Intermediates: inter, CurrentTime: a.clock.Now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, false, fmt.Errorf("verify client certificate %q: %w", leaf.Subject.CommonName, err)
	}
	if leaf.Subject.CommonName == "" {
		return nil, false, errors.New("client certificate has an empty common name")
	}
	return &User{Name: leaf.Subject.CommonName, Groups: slices.Clone(leaf.Subject.Organization)}, true, nil
}

// TokenReviewer creates TokenReviews; client-go's
// AuthenticationV1().TokenReviews() satisfies it.
type TokenReviewer interface {
	Create(ctx context.Context, review *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// TokenOptions tune NewTokenReviewAuthenticator.
type TokenOptions struct {
	// Audiences are asked for in each review; the review must confirm one
	// of them. Empty means the API server's default audience.
	Audiences []string
	// TTL is how long a review's answer (valid or not) is reused.
	// Default DefaultTokenCacheTTL; negative disables the cache.
	TTL time.Duration
	// MaxEntries bounds the cache. Default 8192.
	MaxEntries int
	// Clock times the cache. Default the real clock.
	Clock clock.PassiveClock
}

type tokenAuthenticator struct {
	client TokenReviewer
	opts   TokenOptions
	cache  *ttlCache[tokenResult]
}

type tokenResult struct {
	user *User
	ok   bool
}

// NewTokenReviewAuthenticator authenticates bearer tokens (the
// Authorization header, or a WebSocket subprotocol
// base64url.bearer.authorization.k8s.io.TOKEN) by asking the API server
// with a TokenReview. Answers are cached by a hash of the token for
// opts.TTL; errors talking to the API server are not cached.
func NewTokenReviewAuthenticator(client TokenReviewer, opts TokenOptions) Authenticator {
	if opts.TTL == 0 {
		opts.TTL = DefaultTokenCacheTTL
	}
	return &tokenAuthenticator{client: client, opts: opts, cache: newTTLCache[tokenResult](opts.Clock, opts.MaxEntries)}
}

// bearerToken returns the request's bearer token, from the Authorization
// header or a WebSocket subprotocol (which is then removed, so it is not
// passed on).
func bearerToken(r *http.Request) (string, bool) {
	if h := strings.TrimSpace(r.Header.Get("Authorization")); h != "" {
		scheme, token, found := strings.Cut(h, " ")
		if !found || !strings.EqualFold(scheme, "bearer") {
			return "", false
		}
		token = strings.TrimSpace(token)
		return token, token != ""
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return "", false
	}
	var token string
	var rest []string
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			p = strings.TrimSpace(p)
			if enc, ok := strings.CutPrefix(p, wsProtocolTokenPrefix); ok && token == "" {
				if b, err := base64.RawURLEncoding.DecodeString(enc); err == nil {
					token = string(b)
				}
				continue
			}
			if p != "" {
				rest = append(rest, p)
			}
		}
	}
	if token == "" {
		return "", false
	}
	r.Header.Del("Sec-WebSocket-Protocol")
	if len(rest) > 0 {
		r.Header.Set("Sec-WebSocket-Protocol", strings.Join(rest, ","))
	}
	return token, true
}

func (a *tokenAuthenticator) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	token, ok := bearerToken(r)
	if !ok {
		return nil, false, nil
	}
	sum := sha256.Sum256([]byte(token + "\x00" + strings.Join(a.opts.Audiences, ",")))
	key := hex.EncodeToString(sum[:])
	if res, ok := a.cache.get(key); ok {
		if !res.ok {
			return nil, false, errors.New("invalid bearer token")
		}
		return res.user, true, nil
	}
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.opts.Audiences}}
	got, err := a.client.Create(r.Context(), review, metav1.CreateOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("token review: %w", err)
	}
	res := tokenResult{ok: got.Status.Authenticated && got.Status.Error == ""}
	if res.ok && len(a.opts.Audiences) > 0 && !slices.ContainsFunc(got.Status.Audiences, func(s string) bool { return slices.Contains(a.opts.Audiences, s) }) {
		res.ok = false
	}
	if res.ok {
		ui := got.Status.User
		u := &User{Name: ui.Username, UID: ui.UID, Groups: slices.Clone(ui.Groups)}
		if len(ui.Extra) > 0 {
			u.Extra = map[string][]string{}
			for k, v := range ui.Extra {
				u.Extra[k] = slices.Clone(v)
			}
		}
		res.user = u
	}
	a.cache.set(key, res, a.opts.TTL)
	if !res.ok {
		return nil, false, errors.New("invalid bearer token")
	}
	return res.user, true, nil
}

// SubjectAccessReviewer creates SubjectAccessReviews; client-go's
// AuthorizationV1().SubjectAccessReviews() satisfies it.
type SubjectAccessReviewer interface {
	Create(ctx context.Context, review *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// AuthorizerOptions tune NewSubjectAccessReviewAuthorizer.
type AuthorizerOptions struct {
	// AllowTTL and DenyTTL are how long an allow or a deny is reused.
	// Defaults DefaultAllowCacheTTL and DefaultDenyCacheTTL; negative
	// disables caching that answer.
	AllowTTL, DenyTTL time.Duration
	// MaxEntries bounds the cache. Default 8192.
	MaxEntries int
	// Clock times the cache. Default the real clock.
	Clock clock.PassiveClock
}

type sarAuthorizer struct {
	client SubjectAccessReviewer
	opts   AuthorizerOptions
	cache  *ttlCache[sarResult]
}

type sarResult struct {
	allowed bool
	reason  string
}

// NewSubjectAccessReviewAuthorizer authorizes by asking the API server with
// a SubjectAccessReview for the attributes' user, verb and nodes
// subresource. Answers are cached (allows for AllowTTL, denies for
// DenyTTL); errors are not.
func NewSubjectAccessReviewAuthorizer(client SubjectAccessReviewer, opts AuthorizerOptions) Authorizer {
	if opts.AllowTTL == 0 {
		opts.AllowTTL = DefaultAllowCacheTTL
	}
	if opts.DenyTTL == 0 {
		opts.DenyTTL = DefaultDenyCacheTTL
	}
	return &sarAuthorizer{client: client, opts: opts, cache: newTTLCache[sarResult](opts.Clock, opts.MaxEntries)}
}

func (a *sarAuthorizer) Authorize(ctx context.Context, attrs Attributes) (bool, string, error) {
	if attrs.User == nil {
		return false, "", errors.New("authorize: no user")
	}
	spec := authorizationv1.SubjectAccessReviewSpec{
		User: attrs.User.Name, UID: attrs.User.UID, Groups: attrs.User.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: attrs.Verb, Version: attrs.APIVersion, Resource: attrs.Resource,
			Subresource: attrs.Subresource, Name: attrs.Name,
		},
	}
	if len(attrs.User.Extra) > 0 {
		spec.Extra = map[string]authorizationv1.ExtraValue{}
		for k, v := range attrs.User.Extra {
			spec.Extra[k] = v
		}
	}
	keyJSON, err := json.Marshal(spec)
	if err != nil {
		return false, "", fmt.Errorf("authorize: %w", err)
	}
	key := string(keyJSON)
	if res, ok := a.cache.get(key); ok {
		return res.allowed, res.reason, nil
	}
	got, err := a.client.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subject access review: %w", err)
	}
	res := sarResult{allowed: got.Status.Allowed && !got.Status.Denied, reason: got.Status.Reason}
	if res.allowed {
		a.cache.set(key, res, a.opts.AllowTTL)
	} else {
		a.cache.set(key, res, a.opts.DenyTTL)
	}
	return res.allowed, res.reason, nil
}
