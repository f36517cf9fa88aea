package credentialprovider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
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
}

// Keyring holds the configured providers. Safe for concurrent use.
type Keyring struct {
	providers []*provider
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
	pc, err := ReadConfig(cfg.ConfigPath)
	if err != nil {
		return nil, err
	}
	if errs := ValidateConfig(pc, cfg.ServiceAccountTokens); len(errs) > 0 {
		return nil, fmt.Errorf("failed to validate credential provider config: %w", errs.ToAggregate())
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Environ == nil {
		cfg.Environ = os.Environ
	}
	k := &Keyring{}
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
		k.providers = append(k.providers, &provider{
			name: p.Name, matchImages: p.MatchImages, defaultCache: p.DefaultCacheDuration.Duration,
			plugin: &execPlugin{name: p.Name, bin: bin, apiVersion: p.APIVersion, args: p.Args, env: env},
			clock:  cfg.Clock, cache: map[string]cacheEntry{}, inflight: map[string]*flight{}, lastPurge: cfg.Clock.Now(),
		})
	}
	return k, nil
}

// Lookup returns the providers' credentials for image, a repository
// without tag or digest as kubelet passes it (registry.example.com/team/app),
// in kubelet's order (see the package doc), ready for CRI PullImage. pod
// is the pod pulling (for service-account tokens; unused for now). It
// blocks while plugins run. A provider that fails is logged and gives
// nothing, as in kubelet: the pull goes on with the other credentials.
// The returned configs are the caller's.
func (k *Keyring) Lookup(ctx context.Context, image string, pod *v1.Pod) []*runtimeapi.AuthConfig {
	logger := klog.FromContext(ctx)
	var configs []map[string]Credential
	for _, p := range k.providers {
		auth, err := p.provide(ctx, image)
		if err != nil {
			logger.Error(err, "Failed to provide credentials for image", "provider", p.name, "image", image, "pod", klog.KObj(pod))
			continue
		}
		configs = append(configs, auth)
	}
	creds := lookup(configs, image)
	out := make([]*runtimeapi.AuthConfig, 0, len(creds))
	for _, c := range creds {
		// No ServerAddress, as the pull secrets' (criruntime): the
		// runtime sends them to whichever host serves the image.
		out = append(out, &runtimeapi.AuthConfig{Username: c.Username, Password: c.Password})
	}
	return out
}
