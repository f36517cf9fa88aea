package localcri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/internal/itest"
)

// TestFakeRegistryPull runs agnhost's `fake-registry-server --private` in
// a hostNetwork pod, as upstream's private-registry specs do, and pulls
// FakeRegistryImage through the CRI: refused without credentials and with
// a wrong password, the pause image with user:password.
func TestFakeRegistryPull(t *testing.T) {
	requireHost(t)
	ctx := testContext(t)
	if l, err := net.Listen("tcp", "127.0.0.1:5000"); err != nil {
		t.Fatalf("port 5000 is taken (the fake registry needs it): %v", err)
	} else {
		_ = l.Close()
	}
	c, err := Start(ctx, Config{Dir: shortDir(t), LocalhostRegistries: []string{"localhost:5000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	t.Logf("containerd %s (%s)", c.Version, c.RuntimeVersion)
	var agnhost, pause ImageTar
	for _, it := range c.Images {
		switch it.Name {
		case ImageAgnhost:
			agnhost = it
		case ImagePause:
			pause = it
		}
	}
	if agnhost.Path == "" {
		itest.Require(t, "agnhost image", errors.New("no agnhost binary in the bin dir (NODEKIT_BIN_DIR)"))
	}
	cli, err := dialCRI(c.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	startFakeRegistry(ctx, t, c, cli)

	pull := func(auth *runtimeapi.AuthConfig) (string, error) {
		resp, err := cli.images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: FakeRegistryImage}, Auth: auth})
		return resp.GetImageRef(), err
	}
	denied := func(err error) bool {
		return err != nil && (strings.Contains(err.Error(), "401 Unauthorized") || strings.Contains(err.Error(), "authorization failed"))
	}
	if _, err := pull(nil); !denied(err) {
		t.Errorf("pull without credentials: %v, want 401 Unauthorized", err)
	} else {
		t.Logf("without credentials: %v", err)
	}
	if _, err := pull(&runtimeapi.AuthConfig{Username: "user", Password: "wrong"}); !denied(err) {
		t.Errorf("pull with a wrong password: %v, want 401 Unauthorized", err)
	}
	id, err := pull(&runtimeapi.AuthConfig{Username: "user", Password: "password"})
	if err != nil {
		t.Fatalf("pull with user:password: %v", err)
	}
	if id != pause.ID {
		t.Errorf("pulled %s, want the pause image %s", id, pause.ID)
	}
	st, err := cli.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: FakeRegistryImage}})
	if err != nil || st.GetImage().GetId() != pause.ID {
		t.Errorf("ImageStatus %s = %v, %v; want %s", FakeRegistryImage, st.GetImage(), err, pause.ID)
	}
}

// startFakeRegistry runs agnhost fake-registry-server --private in a
// hostNetwork sandbox as uid 5123 (upstream's registry pod) and waits
// until localhost:5000/v2/ asks for credentials.
func startFakeRegistry(ctx context.Context, t *testing.T, c *Containerd, cli *criClient) {
	t.Helper()
	logDir := filepath.Join(c.Dir, "pod-logs", "registry")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	uid := &runtimeapi.Int64Value{Value: 5123}
	hostNet := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "fake-registry", Namespace: "default", Uid: "fake-registry"},
		LogDirectory: logDir,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: hostNet}},
	}
	startInSandbox(ctx, t, cli, sbCfg, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "registry"},
		Image:    &runtimeapi.ImageSpec{Image: AgnhostImage},
		Args:     []string{"fake-registry-server", "--private"},
		LogPath:  "registry.log",
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			RunAsUser: uid, NamespaceOptions: hostNet}},
	})
	if err := waitUnauthorized(ctx, "http://localhost:5000/v2/"); err != nil {
		log, _ := os.ReadFile(filepath.Join(logDir, "registry.log"))
		t.Fatalf("fake registry: %v (log: %s)", err, log)
	}
}

// waitUnauthorized polls url until it answers 401, for up to 30 s.
func waitUnauthorized(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
			err = fmt.Errorf("GET %s: %s, want 401", url, resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
