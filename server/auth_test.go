package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestRequestAttributes(t *testing.T) {
	u := &User{Name: "alice"}
	cases := []struct {
		name         string
		method, path string
		verb         string
		subresources []string
	}{
		{"pods", "GET", "/pods", "get", []string{"pods", "proxy"}},
		{"pods subpath", "GET", "/pods/x", "get", []string{"pods", "proxy"}},
		{"podsfoo is not pods", "GET", "/podsfoo", "get", []string{"proxy"}},
		{"running pods", "GET", "/runningpods/", "get", []string{"pods", "proxy"}},
		{"running pods without slash", "GET", "/runningpods", "get", []string{"pods", "proxy"}},
		{"healthz", "GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"healthz check", "GET", "/healthz/syncloop", "get", []string{"healthz", "proxy"}},
		{"configz", "GET", "/configz", "get", []string{"configz", "proxy"}},
		{"stats summary", "GET", "/stats/summary", "get", []string{"stats"}},
		{"stats summary post", "POST", "/stats/summary", "create", []string{"stats"}},
		{"stats root", "GET", "/stats", "get", []string{"stats"}},
		{"metrics", "GET", "/metrics", "get", []string{"metrics"}},
		{"metrics resource", "GET", "/metrics/resource", "get", []string{"metrics"}},
		{"metrics probes", "GET", "/metrics/probes", "get", []string{"metrics"}},
		{"system logs", "GET", "/logs/syslog", "get", []string{"log"}},
		{"checkpoint", "POST", "/checkpoint/ns/pod/c", "create", []string{"checkpoint"}},
		{"statusz", "GET", "/statusz", "get", []string{"statusz"}},
		{"flagz", "GET", "/flagz", "get", []string{"configz"}},
		{"container logs", "GET", "/containerLogs/ns/pod/c", "get", []string{"proxy"}},
		{"exec post", "POST", "/exec/ns/pod/c", "create", []string{"proxy"}},
		{"exec get", "GET", "/exec/ns/pod/c", "get", []string{"proxy"}},
		{"attach", "POST", "/attach/ns/pod/c", "create", []string{"proxy"}},
		{"port forward", "POST", "/portForward/ns/pod", "create", []string{"proxy"}},
		{"put", "PUT", "/exec/ns/pod/c", "update", []string{"proxy"}},
		{"pprof", "GET", "/debug/pprof/heap", "get", []string{"proxy"}},
		{"debug flags", "PUT", "/debug/flags/v", "update", []string{"proxy"}},
		{"patch", "PATCH", "/x", "patch", []string{"proxy"}},
		{"delete", "DELETE", "/x", "delete", []string{"proxy"}},
		{"head has no verb", "HEAD", "/pods", "", []string{"pods", "proxy"}},
		{"root", "GET", "/", "get", []string{"proxy"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, nil)
			attrs := RequestAttributes("node-1", u, r)
			var subs []string
			for _, a := range attrs {
				subs = append(subs, a.Subresource)
				if a.Verb != tc.verb || a.Resource != "nodes" || a.Name != "node-1" || a.APIVersion != "v1" || a.User != u || a.Path != tc.path {
					t.Errorf("attributes %+v: want verb %q on nodes/node-1 v1", a, tc.verb)
				}
			}
			if !slices.Equal(subs, tc.subresources) {
				t.Errorf("subresources = %v, want %v", subs, tc.subresources)
			}
		})
	}
}

// authServer is a Server with the given authentication and authorization
// and a handler that records whether it ran.
func authServer(t *testing.T, authn Authenticator, authz Authorizer, anonymous bool) (*Server, *atomic.Int32) {
	t.Helper()
	s, err := New(Config{NodeName: "node-1", Authenticator: authn, Authorizer: authz, AllowAnonymous: anonymous})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	s.secure = s.withAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		u, _ := UserFrom(r.Context())
		_, _ = w.Write([]byte("ran as " + u.Name))
	}))
	return s, &ran
}

func tokenAuthn(valid map[string]string) Authenticator {
	return AuthenticatorFunc(func(r *http.Request) (*User, bool, error) {
		tok, ok := bearerToken(r)
		if !ok {
			return nil, false, nil
		}
		if name, ok := valid[tok]; ok {
			return &User{Name: name}, true, nil
		}
		return nil, false, errors.New("invalid bearer token")
	})
}

func TestAuthFilter(t *testing.T) {
	allowAlice := AuthorizerFunc(func(_ context.Context, a Attributes) (bool, string, error) {
		if a.User.Name == "broken" {
			return false, "", errors.New("authorizer down")
		}
		return a.User.Name == "alice" && a.Subresource == "proxy", "", nil
	})
	authn := tokenAuthn(map[string]string{"a": "alice", "b": "bob", "x": "broken"})
	cases := []struct {
		name      string
		token     string
		anonymous bool
		code      int
		body      string
	}{
		{"no credentials", "", false, 401, "Unauthorized"},
		{"bad token", "nope", false, 401, "Unauthorized"},
		{"allowed", "a", false, 200, "ran as alice"},
		{"forbidden", "b", false, 403, "Forbidden (user=bob, verb=create, resource=nodes, subresource(s)=[proxy])"},
		{"authorizer error", "x", false, 500, "Authorization error (user=broken, verb=create, resource=nodes, subresource=proxy)"},
		{"anonymous allowed in but forbidden", "", true, 403, "user=system:anonymous"},
		{"bad token with anonymous on", "nope", true, 401, "Unauthorized"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, ran := authServer(t, authn, allowAlice, tc.anonymous)
			r := httptest.NewRequest("POST", "/exec/ns/pod/c?command=ls", nil)
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, r)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
				t.Fatalf("got %d %q, want %d containing %q", w.Code, w.Body.String(), tc.code, tc.body)
			}
			if (tc.code == 200) != (ran.Load() == 1) {
				t.Fatalf("handler ran %d times for a %d answer", ran.Load(), w.Code)
			}
		})
	}
}

func TestAuthFilterFallsBackToProxy(t *testing.T) {
	// A caller with only nodes/proxy may still read /pods (pods, then proxy).
	var asked []string
	authz := AuthorizerFunc(func(_ context.Context, a Attributes) (bool, string, error) {
		asked = append(asked, a.Subresource)
		return a.Subresource == "proxy", "", nil
	})
	s, ran := authServer(t, tokenAuthn(map[string]string{"a": "alice"}), authz, false)
	r := httptest.NewRequest("GET", "/pods", nil)
	r.Header.Set("Authorization", "Bearer a")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	if w.Code != 200 || ran.Load() != 1 || !slices.Equal(asked, []string{"pods", "proxy"}) {
		t.Fatalf("code %d, ran %d, asked %v", w.Code, ran.Load(), asked)
	}
}

type fakeTokenReviews struct {
	calls atomic.Int32
	users map[string]authenticationv1.UserInfo
	err   error
}

func (f *fakeTokenReviews) Create(_ context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	f.calls.Add(1)
	if f.err != nil {
		return nil, f.err
	}
	out := tr.DeepCopy()
	if u, ok := f.users[tr.Spec.Token]; ok {
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u, Audiences: tr.Spec.Audiences}
	}
	return out, nil
}

func TestTokenReviewAuthenticatorCaches(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	fake := &fakeTokenReviews{users: map[string]authenticationv1.UserInfo{"good": {Username: "sa", Groups: []string{"g"}}}}
	a := NewTokenReviewAuthenticator(fake, TokenOptions{Clock: clk, TTL: time.Minute})
	req := func(tok string) (*User, bool, error) {
		r := httptest.NewRequest("GET", "/pods", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return a.AuthenticateRequest(r)
	}
	for i := 0; i < 3; i++ {
		u, ok, err := req("good")
		if err != nil || !ok || u.Name != "sa" || !slices.Equal(u.Groups, []string{"g"}) {
			t.Fatalf("good token: %+v %v %v", u, ok, err)
		}
	}
	if n := fake.calls.Load(); n != 1 {
		t.Fatalf("%d reviews for one token within the TTL, want 1", n)
	}
	if _, _, err := req("bad"); err == nil {
		t.Fatal("bad token accepted")
	}
	if _, _, err := req("bad"); err == nil || fake.calls.Load() != 2 {
		t.Fatalf("bad token: err %v, %d reviews (want the denial cached)", err, fake.calls.Load())
	}
	clk.Step(time.Minute)
	if _, ok, _ := req("good"); !ok || fake.calls.Load() != 3 {
		t.Fatalf("after the TTL: ok=%v, %d reviews, want a new review", ok, fake.calls.Load())
	}
	// No header: not identified, no review.
	if _, ok, err := a.AuthenticateRequest(httptest.NewRequest("GET", "/", nil)); ok || err != nil || fake.calls.Load() != 3 {
		t.Fatalf("no token: ok=%v err=%v", ok, err)
	}
	// API errors are not cached.
	fake.err = errors.New("apiserver down")
	if _, _, err := req("other"); err == nil {
		t.Fatal("review error not reported")
	}
	fake.err = nil
	if _, _, err := req("other"); err == nil || fake.calls.Load() != 5 {
		t.Fatalf("after an error: err %v, %d reviews", err, fake.calls.Load())
	}
}

func TestBearerTokenFromWebSocketProtocol(t *testing.T) {
	r := httptest.NewRequest("GET", "/exec/a/b/c", nil)
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.c2VjcmV0")
	tok, ok := bearerToken(r)
	if !ok || tok != "secret" {
		t.Fatalf("token %q %v", tok, ok)
	}
	if got := r.Header.Get("Sec-WebSocket-Protocol"); got != "v5.channel.k8s.io" {
		t.Fatalf("protocols left: %q", got)
	}
}

type fakeSAR struct {
	calls atomic.Int32
	allow func(authorizationv1.SubjectAccessReviewSpec) bool
}

func (f *fakeSAR) Create(_ context.Context, sar *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	f.calls.Add(1)
	out := sar.DeepCopy()
	out.Status.Allowed = f.allow(sar.Spec)
	return out, nil
}

func TestSubjectAccessReviewAuthorizer(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	fake := &fakeSAR{allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
		ra := s.ResourceAttributes
		return s.User == "alice" && ra.Resource == "nodes" && ra.Subresource == "proxy" && ra.Name == "node-1" && ra.Verb == "create" && ra.Version == "v1"
	}}
	a := NewSubjectAccessReviewAuthorizer(fake, AuthorizerOptions{Clock: clk})
	attrs := func(user, sub string) Attributes {
		return Attributes{User: &User{Name: user}, Verb: "create", APIVersion: "v1", Resource: "nodes", Subresource: sub, Name: "node-1"}
	}
	ctx := t.Context()
	if ok, _, err := a.Authorize(ctx, attrs("alice", "proxy")); !ok || err != nil {
		t.Fatalf("alice/proxy: %v %v", ok, err)
	}
	if ok, _, _ := a.Authorize(ctx, attrs("alice", "stats")); ok {
		t.Fatal("alice/stats allowed")
	}
	authorize := func(verb string, want bool) {
		t.Helper()
		if ok, _, _ := a.Authorize(ctx, attrs("alice", verb)); ok != want {
			t.Fatalf("alice/%s allowed = %v, want %v", verb, ok, want)
		}
	}
	authorize("proxy", true)
	authorize("stats", false)
	if n := fake.calls.Load(); n != 2 {
		t.Fatalf("%d reviews, want 2 (both answers cached)", n)
	}
	clk.Step(DefaultDenyCacheTTL)
	authorize("proxy", true)
	authorize("stats", false)
	if n := fake.calls.Load(); n != 3 {
		t.Fatalf("%d reviews after the deny TTL, want 3 (only the deny expired)", n)
	}
	clk.Step(DefaultAllowCacheTTL)
	authorize("proxy", true)
	if n := fake.calls.Load(); n != 4 {
		t.Fatalf("%d reviews after the allow TTL", n)
	}
}

func TestTTLCacheBounded(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	c := newTTLCache[int](clk, 2)
	c.set("a", 1, time.Second)
	c.set("b", 2, 3*time.Second)
	c.set("c", 3, 2*time.Second) // evicts a, the soonest to expire
	if _, ok := c.get("a"); ok || c.len() != 2 {
		t.Fatalf("a kept, len %d", c.len())
	}
	clk.Step(2 * time.Second)
	if _, ok := c.get("c"); ok {
		t.Fatal("c not expired")
	}
	if v, ok := c.get("b"); !ok || v != 2 {
		t.Fatal("b lost")
	}
}

// testCA is a CA that issues client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) client(t *testing.T, cn string, orgs []string, usage x509.ExtKeyUsage) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert
}

func TestX509Authenticator(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	a := NewX509Authenticator(pool, nil)
	withCert := func(c *x509.Certificate) *http.Request {
		r := httptest.NewRequest("GET", "/pods", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
		return r
	}
	u, ok, err := a.AuthenticateRequest(withCert(ca.client(t, "kube-apiserver-kubelet-client", []string{"system:masters"}, x509.ExtKeyUsageClientAuth)))
	if err != nil || !ok || u.Name != "kube-apiserver-kubelet-client" || !slices.Equal(u.Groups, []string{"system:masters"}) {
		t.Fatalf("valid client cert: %+v %v %v", u, ok, err)
	}
	if _, ok, err := a.AuthenticateRequest(withCert(other.client(t, "mallory", nil, x509.ExtKeyUsageClientAuth))); ok || err == nil {
		t.Fatal("certificate of another CA accepted")
	}
	if _, ok, err := a.AuthenticateRequest(withCert(ca.client(t, "server", nil, x509.ExtKeyUsageServerAuth))); ok || err == nil {
		t.Fatal("server certificate accepted as client")
	}
	if _, ok, err := a.AuthenticateRequest(httptest.NewRequest("GET", "/", nil)); ok || err != nil {
		t.Fatalf("no certificate: %v %v", ok, err)
	}
}

func TestUnionAuthenticator(t *testing.T) {
	fail := AuthenticatorFunc(func(*http.Request) (*User, bool, error) { return nil, false, errors.New("bad cert") })
	none := AuthenticatorFunc(func(*http.Request) (*User, bool, error) { return nil, false, nil })
	bob := AuthenticatorFunc(func(*http.Request) (*User, bool, error) { return &User{Name: "bob"}, true, nil })
	r := httptest.NewRequest("GET", "/", nil)
	if u, ok, err := UnionAuthenticator(fail, none, bob).AuthenticateRequest(r); !ok || err != nil || u.Name != "bob" {
		t.Fatalf("union with a success: %v %v %v", u, ok, err)
	}
	if _, ok, err := UnionAuthenticator(none, fail).AuthenticateRequest(r); ok || err == nil {
		t.Fatalf("union of failures: %v %v", ok, err)
	}
	if _, ok, err := UnionAuthenticator(none, nil).AuthenticateRequest(r); ok || err != nil {
		t.Fatalf("union of nothing: %v %v", ok, err)
	}
}

func TestNewRequiresAuthorizer(t *testing.T) {
	if _, err := New(Config{NodeName: "n"}); err == nil || !strings.Contains(err.Error(), "AlwaysAllow") {
		t.Fatalf("New without an Authorizer: %v", err)
	}
}
