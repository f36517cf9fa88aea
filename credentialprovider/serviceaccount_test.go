package credentialprovider

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// fakeSAs serves service accounts from a map and mints tokens tok-1,
// tok-2, ... valid for an hour, recording each TokenRequest.
type fakeSAs struct {
	mu       sync.Mutex
	accounts map[string]*v1.ServiceAccount // by namespace/name
	requests []*authenticationv1.TokenRequest
}

var _ ServiceAccounts = (*fakeSAs)(nil)

func (f *fakeSAs) GetServiceAccount(_ context.Context, namespace, name string) (*v1.ServiceAccount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sa, ok := f.accounts[namespace+"/"+name]
	if !ok {
		return nil, fmt.Errorf("serviceaccounts %q not found", name)
	}
	return sa, nil
}

func (f *fakeSAs) CreateToken(_ context.Context, namespace, name string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	out := req.DeepCopy()
	out.Status.Token = fmt.Sprintf("tok-%d", len(f.requests))
	out.Status.ExpirationTimestamp = metav1.NewTime(time.Unix(1e9, 0).Add(time.Hour))
	return out, nil
}

func saPod(name, uid, sa string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid)}, Spec: v1.PodSpec{ServiceAccountName: sa}}
}

func TestKeyringServiceAccountTokens(t *testing.T) {
	ctx := t.Context()
	sas := &fakeSAs{accounts: map[string]*v1.ServiceAccount{
		"ns/builder": {ObjectMeta: metav1.ObjectMeta{Name: "builder", Namespace: "ns", UID: "sa-uid-1",
			Annotations: map[string]string{"example.com/role": "pull", "example.com/team": "a", "other": "x"}}},
		"ns/bare": {ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "ns", UID: "sa-uid-2"}},
		"ns/deployer": {ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: "ns", UID: "sa-uid-3",
			Annotations: map[string]string{"example.com/role": "push"}}},
	}}
	attrs := func(cacheType string) string {
		return "    serviceAccountTokenAudience: registry.example.com\n    requireServiceAccount: true\n    cacheType: " + cacheType + "\n" +
			"    requiredServiceAccountAnnotationKeys: [example.com/role]\n    optionalServiceAccountAnnotationKeys: [example.com/team]\n"
	}

	t.Run("cacheType ServiceAccount", func(t *testing.T) {
		kr, _, log := setupSA(t, `"*.example.com"`, `"-cache-key-type=Registry"`, attrs("ServiceAccount"), sas)
		if got := kr.Lookup(ctx, "a.example.com/app", saPod("nosa", "u0", "")); len(got) != 0 {
			t.Errorf("credentials %v for a pod without a service account (requireServiceAccount)", got)
		}
		if got := kr.Lookup(ctx, "a.example.com/app", saPod("bare", "u1", "bare")); len(got) != 0 {
			t.Errorf("credentials %v for an account without the required annotation", got)
		}
		if got := calls(t, log); len(got) != 0 {
			t.Fatalf("plugin called %v for pods it must skip", got)
		}
		wantAlice(t, kr.Lookup(ctx, "a.example.com/app", saPod("p1", "u2", "builder")))
		wantAlice(t, kr.Lookup(ctx, "a.example.com/other", saPod("p2", "u3", "builder")))
		wantAlice(t, kr.Lookup(ctx, "a.example.com/app", saPod("p3", "u4", "deployer")))
		got := calls(t, log)
		want := []string{"a.example.com/app token=tok-1 example.com/role=pull example.com/team=a", "a.example.com/app token=tok-3 example.com/role=push"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("plugin calls %q, want %q (one per service account; the second pod of builder served from the cache)", got, want)
		}
		sas.mu.Lock()
		r := sas.requests[len(sas.requests)-1]
		sas.mu.Unlock()
		if r.UID != "sa-uid-3" || !reflect.DeepEqual(r.Spec.Audiences, []string{"registry.example.com"}) ||
			r.Spec.BoundObjectRef == nil || r.Spec.BoundObjectRef.Kind != "Pod" || r.Spec.BoundObjectRef.Name != "p3" || r.Spec.BoundObjectRef.UID != "u4" {
			t.Errorf("TokenRequest %+v, want the audience, bound to pod p3", r)
		}
	})
	t.Run("accounts", func(t *testing.T) {
		// The pull records keep a pull for the account the credentials
		// were given for, from the cache too; a plain provider's are the
		// node's (nil).
		kr, _, log := setupSA(t, `"*.example.com"`, `"-cache-key-type=Registry"`, attrs("ServiceAccount"), sas)
		want := kubeletv1beta1.ImagePullServiceAccount{UID: "sa-uid-1", Namespace: "ns", Name: "builder"}
		for range 2 {
			auths, accounts := kr.LookupWithAccounts(ctx, "a.example.com/app", saPod("p1", "u2", "builder"))
			wantAlice(t, auths)
			if len(accounts) != 1 || accounts[0] == nil || *accounts[0] != want {
				t.Errorf("accounts %v, want [%+v]", accounts, want)
			}
		}
		if got := calls(t, log); len(got) != 1 {
			t.Errorf("plugin calls %q, want one (the second lookup from the cache)", got)
		}
		plain, _, _ := setup(t, `"*.example.com"`, `"-cache-key-type=Registry"`)
		auths, accounts := plain.LookupWithAccounts(ctx, "a.example.com/app", saPod("p1", "u2", "builder"))
		wantAlice(t, auths)
		if len(accounts) != 1 || accounts[0] != nil {
			t.Errorf("a plain provider's accounts %v, want [nil]", accounts)
		}
	})
	t.Run("cacheType Token", func(t *testing.T) {
		before := len(sas.requests)
		kr, _, log := setupSA(t, `"*.example.com"`, `"-cache-key-type=Registry"`, attrs("Token"), sas)
		kr.Lookup(ctx, "a.example.com/app", saPod("p1", "t1", "builder"))
		kr.Lookup(ctx, "a.example.com/app", saPod("p1", "t1", "builder")) // same pod: the token is reused, so is the cache entry
		kr.Lookup(ctx, "a.example.com/app", saPod("p2", "t2", "builder")) // another pod: another token, another entry
		if got := calls(t, log); len(got) != 2 {
			t.Errorf("plugin calls %q, want two (one per token)", got)
		}
		if n := len(sas.requests) - before; n != 2 {
			t.Errorf("%d TokenRequests, want two (one per pod)", n)
		}
	})
	t.Run("the token as the password", func(t *testing.T) {
		kr, _, _ := setupSA(t, `"*.example.com"`, `"-token-as-password"`, attrs("ServiceAccount"), sas)
		_, _, err := kr.providers[0].provide(ctx, "a.example.com/app", saPod("p1", "x1", "builder"))
		if err == nil || !strings.Contains(err.Error(), "returned the service account token as the password") {
			t.Errorf("error %v, want the token refused as a password", err)
		}
		kr, _, _ = setupSA(t, `"*.example.com"`, `"-token-as-password"`, attrs("Token"), sas)
		if got := kr.Lookup(ctx, "a.example.com/app", saPod("p1", "x2", "builder")); len(got) != 1 || !strings.HasPrefix(got[0].Password, "tok-") {
			t.Errorf("cacheType Token: credentials %v, want the token as the password", got)
		}
	})
	t.Run("no client", func(t *testing.T) {
		_, err := loadSA(t, attrs("ServiceAccount"))
		if err == nil || !strings.Contains(err.Error(), `providers.tokenAttributes: Forbidden: provider "credprovtest": service-account tokens need an API server client`) {
			t.Errorf("Load without ServiceAccounts: %v", err)
		}
	})
}

// loadSA loads a provider with tokenAttributes and no ServiceAccounts.
func loadSA(t *testing.T, tokenAttributes string) (*Keyring, error) {
	t.Helper()
	path := t.TempDir() + "/c.yaml"
	writeFile(t, path, header+"providers:\n"+providerYAML("credprovtest")+"  tokenAttributes:\n"+tokenAttributes)
	return Load(Config{ConfigPath: path, BinDir: testPlugin(t), ServiceAccountTokens: true})
}
