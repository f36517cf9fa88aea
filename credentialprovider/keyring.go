package credentialprovider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// Config says where the providers are. ConfigPath and BinDir are
// kubelet's --image-credential-provider-config and
// --image-credential-provider-bin-dir; both are required.
type Config struct {
	ConfigPath string
	BinDir     string
	// ServiceAccountTokens is the state of the feature gate
	// KubeletServiceAccountTokenForCredentialProviders (beta, on in v1.37).
	ServiceAccountTokens bool
	// Clock times the cache. Default: the real clock.
	Clock clock.PassiveClock
	// Environ is the environment the plugins start with, before each
	// provider's env. Default: os.Environ.
	Environ func() []string
	// ServiceAccounts serves the providers with tokenAttributes (the
	// pod's service account, tokens for it). Without it such a provider
	// is refused at Load, naming the field (an agent without an API
	// server has no tokens to give).
	ServiceAccounts ServiceAccounts
}

// Keyring holds the configured providers. Safe for concurrent use.
type Keyring struct {
	providers  []*provider
	configHash string
	metrics    *metrics
}

// Load reads and validates the config and checks each provider's binary,
// with kubelet's messages. It runs no plugin.
func Load(cfg Config) (*Keyring, error) {
	if _, err := os.Stat(cfg.BinDir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("plugin binary directory %s did not exist", cfg.BinDir)
		}
		return nil, fmt.Errorf("error inspecting binary directory %s: %w", cfg.BinDir, err)
	}
	pc, hash, err := readConfig(cfg.ConfigPath)
	if err != nil {
		return nil, err
	}
	errs := ValidateConfig(pc, cfg.ServiceAccountTokens)
	for _, p := range pc.Providers {
		if p.TokenAttributes != nil && cfg.ServiceAccountTokens && cfg.ServiceAccounts == nil {
			errs = append(errs, field.Forbidden(field.NewPath("providers").Child("tokenAttributes"),
				fmt.Sprintf("provider %q: service-account tokens need an API server client, which this agent does not have", p.Name)))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("failed to validate credential provider config: %w", errs.ToAggregate())
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	tokens := &tokenCache{sas: cfg.ServiceAccounts, clock: cfg.Clock, tokens: map[string]cachedToken{}}
	if cfg.Environ == nil {
		cfg.Environ = os.Environ
	}
	k := &Keyring{configHash: hash, metrics: newMetrics(hash)}
	for _, p := range pc.Providers {
		bin, err := exec.LookPath(filepath.Join(cfg.BinDir, p.Name))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
				return nil, fmt.Errorf("plugin binary executable %s did not exist", filepath.Join(cfg.BinDir, p.Name))
			}
			return nil, fmt.Errorf("error inspecting binary executable %s: %w", filepath.Join(cfg.BinDir, p.Name), err)
		}
		env := cfg.Environ()
		for _, e := range p.Env {
			env = append(env, e.Name+"="+e.Value)
		}
		pr := &provider{
			name: p.Name, matchImages: p.MatchImages, defaultCache: p.DefaultCacheDuration.Duration,
			plugin: &execPlugin{name: p.Name, bin: bin, apiVersion: p.APIVersion, args: p.Args, env: env, clock: cfg.Clock, metrics: k.metrics},
			clock:  cfg.Clock, cache: map[string]cacheEntry{}, inflight: map[string]*flight{}, lastPurge: cfg.Clock.Now(),
		}
		if p.TokenAttributes != nil && cfg.ServiceAccountTokens {
			pr.sa = &saProvider{attrs: *p.TokenAttributes, sas: cfg.ServiceAccounts, tokens: tokens}
		}
		k.providers = append(k.providers, pr)
	}
	return k, nil
}

// Lookup returns the providers' credentials for image, a repository
// without tag or digest as kubelet passes it (registry.example.com/team/app),
// in kubelet's order (see the package doc), ready for CRI PullImage. pod
// is the pod pulling: providers with tokenAttributes get a token for its
// service account. It blocks while plugins run. A provider that fails is logged and gives
// nothing, as in kubelet: the pull goes on with the other credentials.
// The returned configs are the caller's.
func (k *Keyring) Lookup(ctx context.Context, image string, pod *v1.Pod) []*runtimeapi.AuthConfig {
	auths, _ := k.LookupWithAccounts(ctx, image, pod)
	return auths
}

// LookupWithAccounts is Lookup with, for each credential, the service
// account it was given for: the pod's account (namespace, name, UID) for
// a provider with tokenAttributes asked with a token, nil for a
// provider's node-wide credentials. The image pull records
// (KubeletEnsureSecretPulledImages) keep an image pulled with the former
// for that account, with the latter for every pod of the node, as
// kubelet.
func (k *Keyring) LookupWithAccounts(ctx context.Context, image string, pod *v1.Pod) ([]*runtimeapi.AuthConfig, []*kubeletv1beta1.ImagePullServiceAccount) {
	logger := klog.FromContext(ctx)
	var configs []map[string]Credential
	for _, p := range k.providers {
		auth, account, err := p.provide(ctx, image, pod)
		if err != nil {
			logger.Error(err, "Failed to provide credentials for image", "provider", p.name, "image", image, "pod", klog.KObj(pod))
			continue
		}
		if account != nil {
			// The cached map is shared: the account goes on a copy.
			tagged := make(map[string]Credential, len(auth))
			for pattern, c := range auth {
				c.account = account
				tagged[pattern] = c
			}
			auth = tagged
		}
		configs = append(configs, auth)
	}
	creds := lookup(configs, image)
	out := make([]*runtimeapi.AuthConfig, 0, len(creds))
	accounts := make([]*kubeletv1beta1.ImagePullServiceAccount, 0, len(creds))
	for _, c := range creds {
		// No ServerAddress, as the pull secrets' (criruntime): the
		// runtime sends them to whichever host serves the image.
		out = append(out, &runtimeapi.AuthConfig{Username: c.Username, Password: c.Password})
		var account *kubeletv1beta1.ImagePullServiceAccount
		if c.account != nil {
			a := *c.account
			account = &a
		}
		accounts = append(accounts, account)
	}
	return out, accounts
}
