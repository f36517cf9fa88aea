package agenttest

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/localcp"
	"github.com/nodekit/nodekit/internal/localcri"
	"github.com/nodekit/nodekit/internal/localregistry"
)

// Registry is a private OCI image registry (the CNCF distribution
// registry) on loopback serving one test, over TLS from a test CA, holding
// the local test images under their tags (BusyboxImage, AgnhostImage, ...).
// A containerd started WithRegistryMirror pulls from it for real.
type Registry struct {
	Host    string // "127.0.0.1:PORT"
	CAFile  string // the CA its serving certificate is signed by
	LogFile string // the registry's log: one access-log line per request

	t      testing.TB
	r      *localregistry.Registry
	images []localcri.ImageTar
}

// RegistryOption changes what StartRegistry starts.
type RegistryOption func(*localregistry.Config)

// WithRegistryUsers turns on htpasswd authentication: every pull then
// needs one of these user names and passwords.
func WithRegistryUsers(users map[string]string) RegistryOption {
	return func(c *localregistry.Config) { c.Users = users }
}

// WithRegistryPullDelay holds every manifest request of a puller for d,
// so that pulls overlap long enough for MaxConcurrentPulls to see how many
// ran at once (serializeImagePulls, maxParallelImagePulls).
func WithRegistryPullDelay(d time.Duration) RegistryOption {
	return func(c *localregistry.Config) { c.PullDelay = d }
}

// MaxConcurrentPulls is the most pulls the registry served at once so far;
// 0 without WithRegistryPullDelay.
func (r *Registry) MaxConcurrentPulls() int { return r.r.MaxConcurrentPulls() }

// StartRegistry starts a registry for t and pushes the local test images
// to it under every tag they have; t.Cleanup stops it. Without the
// registry binary (`make tools` builds it) the test is skipped (or fails,
// with $NODEKIT_REQUIRE_INTEGRATION set).
func StartRegistry(t testing.TB, opts ...RegistryOption) *Registry {
	t.Helper()
	itest.Short(t, "local registry")
	var cfg localregistry.Config
	for _, o := range opts {
		o(&cfg)
	}
	if _, err := localregistry.FindBinary(cfg.BinDir); err != nil {
		if missing := (*localregistry.MissingBinaryError)(nil); errors.As(err, &missing) {
			RequireIntegration(t, "local registry", err)
		}
		t.Fatalf("agenttest: %v", err)
	}
	binDir, err := localcp.FindBinDir()
	if err != nil {
		t.Fatalf("agenttest: registry: %v", err)
	}
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1))))
	images, err := localcri.BuildImages(ctx, filepath.Join(filepath.Dir(binDir), "images"), binDir)
	if err != nil {
		t.Fatalf("agenttest: registry images: %v", err)
	}
	cfg.Dir = t.TempDir()
	r, err := localregistry.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("agenttest: start registry: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("agenttest: stop registry: %v", err)
		}
	})
	clk := clock.RealClock{}
	start := clk.Now()
	for _, it := range images {
		if err := r.Push(ctx, it.Path, it.Tags...); err != nil {
			t.Fatalf("agenttest: registry: %v", err)
		}
	}
	t.Logf("agenttest: registry %s holds %d local images (pushed in %v)", r.Host, len(images), clk.Since(start).Round(time.Millisecond))
	return &Registry{Host: r.Host, CAFile: r.CAFile, LogFile: r.LogFile, t: t, r: r, images: images}
}

// Push pushes the local image tagged local (e.g. BusyboxImage) under ref
// as well, e.g. "private.nodekit.test/team/busybox:1.0". The test fails on
// error.
func (r *Registry) Push(local, ref string) {
	r.t.Helper()
	for _, it := range r.images {
		for _, tag := range it.Tags {
			if tag == local {
				if err := r.r.Push(r.t.Context(), it.Path, ref); err != nil {
					r.t.Fatalf("agenttest: registry: %v", err)
				}
				return
			}
		}
	}
	r.t.Fatalf("agenttest: registry: no local image is tagged %s", local)
}

// ImageID returns the image ID (config digest) of the local image tagged
// local, as the CRI reports it once pulled; "" if there is none.
func (r *Registry) ImageID(local string) string {
	for _, it := range r.images {
		for _, tag := range it.Tags {
			if tag == local {
				return it.ID
			}
		}
	}
	return ""
}

// WithRegistryMirror makes containerd pull images of the registry names
// (default: registry.k8s.io, docker.io, gcr.io, quay.io and the other
// names node tests use) from reg, and import only the pause image, so
// that pods pull for real. Names no mirror lists still fail at once.
func WithRegistryMirror(reg *Registry, names ...string) ContainerdOption {
	return func(c *localcri.Config) {
		c.Mirrors = append(c.Mirrors, localcri.Mirror{Names: names, Host: reg.Host, CAFile: reg.CAFile})
	}
}
