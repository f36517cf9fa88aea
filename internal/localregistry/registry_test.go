package localregistry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/localcp"
	"github.com/nodekit/nodekit/internal/localcri"
	"github.com/nodekit/nodekit/internal/localregistry"
)

// startRegistry starts a registry for t, skipping (or failing, with
// $NODEKIT_REQUIRE_INTEGRATION) when the binary is not built.
func startRegistry(t *testing.T, users map[string]string) *localregistry.Registry {
	t.Helper()
	itest.Short(t, "local registry")
	if _, err := localregistry.FindBinary(""); err != nil {
		if missing := (*localregistry.MissingBinaryError)(nil); errors.As(err, &missing) {
			itest.Require(t, "local registry", err)
		}
		t.Fatal(err)
	}
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1))))
	reg, err := localregistry.Start(ctx, localregistry.Config{Dir: t.TempDir(), Users: users})
	if err != nil {
		t.Fatalf("start registry: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := reg.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return reg
}

// busyboxTar builds (or finds cached) the local busybox image.
func busyboxTar(t *testing.T) localcri.ImageTar {
	t.Helper()
	binDir, err := localcp.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	images, err := localcri.BuildImages(t.Context(), filepath.Join(filepath.Dir(binDir), "images"), binDir)
	if err != nil {
		t.Fatalf("build images: %v", err)
	}
	for _, it := range images {
		if it.Name == localcri.ImageBusybox {
			return it
		}
	}
	t.Fatal("no busybox image built")
	return localcri.ImageTar{}
}

type getter struct {
	t      *testing.T
	client *http.Client
	reg    *localregistry.Registry
}

func newGetter(t *testing.T, reg *localregistry.Registry) getter {
	pool, err := certPool(reg.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	return getter{t: t, reg: reg, client: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig(pool)}}}
}

// get fetches path with optional basic auth ("" user for none), as a
// puller would: the manifest accepted as OCI.
func (g getter) get(path, user, password string) (*http.Response, []byte) {
	g.t.Helper()
	req, err := http.NewRequestWithContext(g.t.Context(), http.MethodGet, g.reg.URL+path, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatalf("GET %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp, body
}

func TestRegistryPushAndPullWithAuth(t *testing.T) {
	reg := startRegistry(t, map[string]string{"alice": "s3cret"})
	img := busyboxTar(t)
	refs := []string{"registry.k8s.io/e2e-test-images/busybox:1.37.0-2", "private.nodekit.test/team/busybox:1.0"}
	if err := reg.Push(t.Context(), img.Path, refs...); err != nil {
		t.Fatalf("push: %v", err)
	}
	// A second push finds every blob there and only re-tags.
	if err := reg.Push(t.Context(), img.Path, refs...); err != nil {
		t.Fatalf("push again: %v", err)
	}
	g := newGetter(t, reg)
	for _, path := range []string{"/v2/e2e-test-images/busybox/manifests/1.37.0-2", "/v2/team/busybox/manifests/1.0"} {
		resp, _ := g.get(path, "", "")
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("Www-Authenticate"), "Basic") {
			t.Errorf("GET %s without credentials: %s, Www-Authenticate %q; want 401 Basic", path, resp.Status, resp.Header.Get("Www-Authenticate"))
		}
		if resp, _ := g.get(path, "alice", "wrong"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong password: %s, want 401", path, resp.Status)
		}
		resp, body := g.get(path, "alice", "s3cret")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s as alice: %s: %s", path, resp.Status, body)
		}
		if got := resp.Header.Get("Docker-Content-Digest"); got != img.Manifest {
			t.Errorf("GET %s: digest %s, want the layout's manifest %s", path, got, img.Manifest)
		}
	}
	// The config blob is the image ID; it came over with the push.
	resp, body := g.get("/v2/team/busybox/blobs/"+img.ID, "alice", "s3cret")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"rootfs"`) {
		t.Errorf("GET config blob %s: %s %.200s", img.ID, resp.Status, body)
	}
	log, err := os.ReadFile(reg.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"GET /v2/team/busybox/manifests/1.0 HTTP/1.1" 200`) {
		t.Errorf("registry log has no access-log line for the manifest GET:%s", tail(string(log)))
	}
}

func TestRegistryAnonymous(t *testing.T) {
	reg := startRegistry(t, nil)
	img := busyboxTar(t)
	// No refs: the names the layout's index gives (its tags).
	if err := reg.Push(t.Context(), img.Path); err != nil {
		t.Fatalf("push: %v", err)
	}
	g := newGetter(t, reg)
	for _, tag := range img.Tags {
		repo, ref, err := localregistry.ParseReference(tag)
		if err != nil {
			t.Fatal(err)
		}
		if resp, body := g.get("/v2/"+repo+"/manifests/"+ref, "", ""); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s (%s) anonymously: %s: %s", tag, repo, resp.Status, body)
		}
	}
	if resp, _ := g.get("/v2/e2e-test-images/busybox/manifests/no-such-tag", "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET a missing tag: %s, want 404", resp.Status)
	}
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "\n" + strings.Join(lines, "\n")
}

// TestRegistryPullDelay: with PullDelay, manifest requests are held and
// the most held at once is counted; Push is not held.
func TestRegistryPullDelay(t *testing.T) {
	itest.Short(t, "local registry")
	if _, err := localregistry.FindBinary(""); err != nil {
		itest.Require(t, "local registry", err)
	}
	ctx := t.Context()
	reg, err := localregistry.Start(ctx, localregistry.Config{Dir: t.TempDir(), PullDelay: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Stop(context.WithoutCancel(ctx)) }()
	img := busyboxTar(t)
	if err := reg.Push(ctx, img.Path, "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"); err != nil {
		t.Fatal(err)
	}
	if n := reg.MaxConcurrentPulls(); n != 0 {
		t.Fatalf("after Push: %d held, want 0 (Push bypasses the delay)", n)
	}
	g := newGetter(t, reg)
	done := make(chan int, 3)
	start := time.Now()
	for range 3 {
		go func() {
			resp, _ := g.get("/v2/e2e-test-images/busybox/manifests/1.37.0-2", "", "")
			done <- resp.StatusCode
		}()
	}
	for range 3 {
		if code := <-done; code != http.StatusOK {
			t.Errorf("GET through the proxy: %d", code)
		}
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("three held GETs took %v, want at least the delay", took)
	}
	if n := reg.MaxConcurrentPulls(); n != 3 {
		t.Errorf("MaxConcurrentPulls = %d, want 3 (three GETs at once)", n)
	}
}
