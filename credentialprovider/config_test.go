package credentialprovider

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1 "k8s.io/kubelet/config/v1"
)

func TestValidateConfig(t *testing.T) {
	good := func() kubeletv1.CredentialProvider {
		return kubeletv1.CredentialProvider{Name: "ecr", MatchImages: []string{"*.dkr.ecr.*.amazonaws.com"},
			DefaultCacheDuration: &metav1.Duration{Duration: time.Minute}, APIVersion: "credentialprovider.kubelet.k8s.io/v1"}
	}
	yes := true
	tests := []struct {
		name     string
		mutate   func(*kubeletv1.CredentialProvider)
		none     bool
		saTokens bool
		want     []string // substrings of the aggregate; none means valid
	}{
		{name: "valid", mutate: func(*kubeletv1.CredentialProvider) {}},
		{name: "valid v1beta1 exec", mutate: func(p *kubeletv1.CredentialProvider) { p.APIVersion = "credentialprovider.kubelet.k8s.io/v1beta1" }},
		{name: "no providers", none: true, want: []string{"providers: Required value: at least 1 item in plugins is required"}},
		{name: "slash in name", mutate: func(p *kubeletv1.CredentialProvider) { p.Name = "a/b" },
			want: []string{`providers.name: Invalid value: "a/b": provider name cannot contain '/'`}},
		{name: "space in name", mutate: func(p *kubeletv1.CredentialProvider) { p.Name = "a b" },
			want: []string{"provider name cannot contain spaces"}},
		{name: "dot dot", mutate: func(p *kubeletv1.CredentialProvider) { p.Name = ".." }, want: []string{"provider name cannot be '..'"}},
		{name: "no apiVersion", mutate: func(p *kubeletv1.CredentialProvider) { p.APIVersion = "" },
			want: []string{"providers.apiVersion: Required value"}},
		{name: "unknown apiVersion", mutate: func(p *kubeletv1.CredentialProvider) { p.APIVersion = "credentialprovider.kubelet.k8s.io/v2" },
			want: []string{`providers.apiVersion: Unsupported value: "credentialprovider.kubelet.k8s.io/v2"`}},
		{name: "no matchImages", mutate: func(p *kubeletv1.CredentialProvider) { p.MatchImages = nil },
			want: []string{"providers.matchImages: Required value: at least 1 item in matchImages is required"}},
		{name: "bad matchImage", mutate: func(p *kubeletv1.CredentialProvider) { p.MatchImages = []string{"%invalid"} },
			want: []string{`providers.matchImages: Invalid value: "%invalid": match image is invalid:`}},
		{name: "no defaultCacheDuration", mutate: func(p *kubeletv1.CredentialProvider) { p.DefaultCacheDuration = nil },
			want: []string{"providers.defaultCacheDuration: Required value"}},
		{name: "negative defaultCacheDuration", mutate: func(p *kubeletv1.CredentialProvider) { p.DefaultCacheDuration.Duration = -time.Second },
			want: []string{"providers.defaultCacheDuration: Invalid value", "must be greater than or equal to 0"}},
		{name: "tokenAttributes with the gate off", mutate: func(p *kubeletv1.CredentialProvider) {
			p.TokenAttributes = &kubeletv1.ServiceAccountTokenAttributes{ServiceAccountTokenAudience: "aud", RequireServiceAccount: &yes}
		}, want: []string{"providers.tokenAttributes: Forbidden: tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled"}},
		{name: "tokenAttributes valid", saTokens: true, mutate: func(p *kubeletv1.CredentialProvider) {
			p.TokenAttributes = &kubeletv1.ServiceAccountTokenAttributes{ServiceAccountTokenAudience: "aud", RequireServiceAccount: &yes, CacheType: "ServiceAccount",
				RequiredServiceAccountAnnotationKeys: []string{"example.com/role"}, OptionalServiceAccountAnnotationKeys: []string{"example.com/team"}}
		}},
		{name: "tokenAttributes annotation keys and cacheType", saTokens: true, mutate: func(p *kubeletv1.CredentialProvider) {
			no := false
			p.TokenAttributes = &kubeletv1.ServiceAccountTokenAttributes{ServiceAccountTokenAudience: "aud", RequireServiceAccount: &no, CacheType: "Pod",
				RequiredServiceAccountAnnotationKeys: []string{"a/b", "a/b"}, OptionalServiceAccountAnnotationKeys: []string{"a/b", "bad key"}}
		}, want: []string{"providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set",
			`providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Duplicate value: "a/b"`,
			`providers.tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value: "bad key"`,
			"annotation keys cannot be both required and optional",
			`providers.tokenAttributes.cacheType: Unsupported value: "Pod"`}},
		{name: "tokenAttributes without cacheType", saTokens: true, mutate: func(p *kubeletv1.CredentialProvider) {
			p.TokenAttributes = &kubeletv1.ServiceAccountTokenAttributes{ServiceAccountTokenAudience: "aud", RequireServiceAccount: &yes}
		}, want: []string{"providers.tokenAttributes.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token"}},
		{name: "tokenAttributes incomplete", saTokens: true, mutate: func(p *kubeletv1.CredentialProvider) {
			p.TokenAttributes = &kubeletv1.ServiceAccountTokenAttributes{}
			p.APIVersion = "credentialprovider.kubelet.k8s.io/v1beta1"
		}, want: []string{"providers.tokenAttributes.serviceAccountTokenAudience: Required value", "providers.tokenAttributes.requireServiceAccount: Required value",
			"tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &kubeletv1.CredentialProviderConfig{}
			if !tc.none {
				p := good()
				tc.mutate(&p)
				cfg.Providers = []kubeletv1.CredentialProvider{p}
			}
			errs := ValidateConfig(cfg, tc.saTokens)
			if len(tc.want) == 0 {
				if len(errs) != 0 {
					t.Fatalf("errors %v, want none", errs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("no errors, want %q", tc.want)
			}
			got := errs.ToAggregate().Error()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("errors %q lack %q", got, w)
				}
			}
		})
	}
	t.Run("duplicate names", func(t *testing.T) {
		errs := ValidateConfig(&kubeletv1.CredentialProviderConfig{Providers: []kubeletv1.CredentialProvider{good(), good()}}, true)
		if got := errs.ToAggregate().Error(); !strings.Contains(got, `providers.name: Duplicate value: "ecr"`) {
			t.Errorf("errors %q, want the duplicate name", got)
		}
	})
}

const header = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n"

func providerYAML(name string) string {
	return "- name: " + name + "\n  matchImages: [\"*.example.com\"]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	t.Run("directory in lexical order", func(t *testing.T) {
		d := filepath.Join(dir, "conf.d")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(d, "20-b.yaml"), header+"providers:\n"+providerYAML("b"))
		writeFile(t, filepath.Join(d, "10-a.json"), `{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"a","matchImages":["x.io"],"defaultCacheDuration":"1m","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]}`)
		writeFile(t, filepath.Join(d, "30-ignored.conf"), "not read")
		cfg, err := ReadConfig(d)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range cfg.Providers {
			names = append(names, p.Name)
		}
		if strings.Join(names, ",") != "a,b" {
			t.Errorf("providers %v, want a,b", names)
		}
		writeFile(t, filepath.Join(d, "40-dup.yml"), header+"providers:\n"+providerYAML("a"))
		if _, err := ReadConfig(d); err == nil || !strings.Contains(err.Error(), `duplicate provider name "a" found in configuration file(s)`) {
			t.Errorf("duplicate across files: %v", err)
		}
	})
	for _, tc := range []struct{ name, data, want string }{
		{"unknown field", header + "providers:\n" + providerYAML("a") + "  cacheKeyType: Image\n", `unknown field "cacheKeyType"`},
		{"wrong version", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\nproviders:\n" + providerYAML("a"), `apiVersion "kubelet.config.k8s.io/v1beta1": nodekit reads kubelet.config.k8s.io/v1 only`},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n", `kind "KubeletConfiguration", want CredentialProviderConfig`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			writeFile(t, f, tc.data)
			_, err := ReadConfig(f)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), f) {
				t.Errorf("error %v, want %q naming the file", err, tc.want)
			}
		})
	}
	if _, err := ReadConfig(filepath.Join(dir, "absent")); err == nil || !strings.Contains(err.Error(), "unable to access path") {
		t.Errorf("absent file: %v", err)
	}
}
