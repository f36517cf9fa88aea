package localcri

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/localregistry"
)

func TestValidateMirrors(t *testing.T) {
	for name, tc := range map[string]struct {
		mirrors []Mirror
		want    string // "" for valid
	}{
		"loopback":        {mirrors: []Mirror{{Host: "127.0.0.1:5000", CAFile: "/ca.crt"}}},
		"two, disjoint":   {mirrors: []Mirror{{Host: "127.0.0.1:5000"}, {Host: "[::1]:5001", Names: []string{"private.test"}}}},
		"not loopback":    {mirrors: []Mirror{{Host: "10.0.0.1:5000"}}, want: "not a loopback IP"},
		"a name":          {mirrors: []Mirror{{Host: "registry.k8s.io:443"}}, want: "not a loopback IP"},
		"no port":         {mirrors: []Mirror{{Host: "127.0.0.1"}}, want: "Mirrors[0].Host"},
		"relative CA":     {mirrors: []Mirror{{Host: "127.0.0.1:5000", CAFile: "ca.crt"}}, want: "CAFile"},
		"twice":           {mirrors: []Mirror{{Host: "127.0.0.1:5000"}, {Host: "127.0.0.1:5001", Names: []string{"gcr.io"}}}, want: `"gcr.io" is mirrored twice`},
		"_default":        {mirrors: []Mirror{{Host: "127.0.0.1:5000", Names: []string{"_default"}}}, want: "not a registry host name"},
		"path in a name":  {mirrors: []Mirror{{Host: "127.0.0.1:5000", Names: []string{"../etc"}}}, want: "not a registry host name"},
		"none is allowed": {},
	} {
		t.Run(name, func(t *testing.T) {
			err := validateMirrors(tc.mirrors)
			if tc.want == "" && err != nil {
				t.Fatalf("validateMirrors: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("validateMirrors = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestMirrorHostsTOML checks that a mirrored name's hosts.toml has the
// mirror as its server and only host, so that containerd has nowhere else
// to go.
func TestMirrorHostsTOML(t *testing.T) {
	l := newLayout(t.TempDir())
	mirrors := []Mirror{{Host: "127.0.0.1:5000", CAFile: "/pki/ca.crt"}, {Host: "127.0.0.1:5001", Names: []string{"private.test"}}}
	if err := writeRegistryConfig(l); err != nil {
		t.Fatal(err)
	}
	if err := writeMirrorConfig(l, mirrors); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(l.registries, name, "hosts.toml"))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, name := range MirroredRegistries {
		got := read(name)
		for _, want := range []string{`server = "https://127.0.0.1:5000"`, `[host."https://127.0.0.1:5000"]`, `ca = "/pki/ca.crt"`} {
			if !strings.Contains(got, want) {
				t.Errorf("%s/hosts.toml lacks %s:\n%s", name, want, got)
			}
		}
		if n := strings.Count(got, "[host."); n != 1 {
			t.Errorf("%s/hosts.toml has %d hosts, want the mirror only:\n%s", name, n, got)
		}
	}
	if got := read("private.test"); !strings.Contains(got, `server = "https://127.0.0.1:5001"`) || strings.Contains(got, "ca =") {
		t.Errorf("private.test/hosts.toml:\n%s", got)
	}
	// What no mirror names stays on the closed port.
	for _, name := range []string{"_default", "invalid.registry.k8s.io"} {
		if got := read(name); !strings.Contains(got, blackholeRegistry) {
			t.Errorf("%s/hosts.toml is not blackholed:\n%s", name, got)
		}
	}
}

func TestImagesToImport(t *testing.T) {
	all := []ImageTar{{Name: ImageBusybox}, {Name: ImagePause}, {Name: ImageAgnhost}}
	if got := imagesToImport(all, nil, false); len(got) != 3 {
		t.Errorf("without mirrors: %v, want all", got)
	}
	if got := imagesToImport(all, []Mirror{{Host: "127.0.0.1:1"}}, false); len(got) != 1 || got[0].Name != ImagePause {
		t.Errorf("with mirrors: %v, want pause only", got)
	}
}

// privateRegistry is the name TestMirrorPulls serves from the registry with
// authentication.
const privateRegistry = "private.nodekit.test"

// startTestRegistry starts a registry for t, skipping (or failing) when the
// binary is not built.
func startTestRegistry(t *testing.T, users map[string]string) *localregistry.Registry {
	t.Helper()
	ctx := testContext(t)
	if _, err := localregistry.FindBinary(""); err != nil {
		if missing := (*localregistry.MissingBinaryError)(nil); errors.As(err, &missing) {
			itest.Require(t, "local registry", err)
		}
		t.Fatal(err)
	}
	reg, err := localregistry.Start(ctx, localregistry.Config{Dir: t.TempDir(), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := reg.Stop(ctx); err != nil {
			t.Errorf("stop registry: %v", err)
		}
	})
	return reg
}

// TestMirrorPulls pulls through the CRI from two local registries: an
// anonymous one standing in for registry.k8s.io and the rest, and one with
// htpasswd auth under a private name.
func TestMirrorPulls(t *testing.T) {
	requireHost(t)
	ctx := testContext(t)
	public := startTestRegistry(t, nil)
	private := startTestRegistry(t, map[string]string{"alice": "s3cret"})
	c, err := Start(ctx, Config{Dir: shortDir(t), Mirrors: []Mirror{
		{Host: public.Host, CAFile: public.CAFile},
		{Host: private.Host, CAFile: private.CAFile, Names: []string{privateRegistry}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	t.Logf("containerd %s (%s)", c.Version, c.RuntimeVersion)
	var busybox ImageTar
	for _, it := range c.Built {
		if it.Name == ImageBusybox {
			busybox = it
		}
	}
	if len(c.Images) != 1 || c.Images[0].Name != ImagePause || busybox.Path == "" {
		t.Fatalf("imported %v, built %d images; want pause imported and busybox built", c.Images, len(c.Built))
	}
	privateRef := privateRegistry + "/team/busybox:1.0"
	if err := public.Push(ctx, busybox.Path, BusyboxImage); err != nil {
		t.Fatal(err)
	}
	if err := private.Push(ctx, busybox.Path, privateRef); err != nil {
		t.Fatal(err)
	}
	cli, err := dialCRI(c.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	pull := func(ref string, auth *runtimeapi.AuthConfig) (string, error) {
		resp, err := cli.images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}, Auth: auth})
		return resp.GetImageRef(), err
	}
	if st, err := cli.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: BusyboxImage}}); err != nil || st.GetImage() != nil {
		t.Fatalf("busybox before the pull: %v, %v; want absent", st.GetImage(), err)
	}
	start := time.Now()
	id, err := pull(BusyboxImage, nil)
	if err != nil {
		t.Fatalf("pull %s: %v", BusyboxImage, err)
	}
	t.Logf("pulled %s in %v: %s", BusyboxImage, time.Since(start), id)
	if id != busybox.ID {
		t.Errorf("pulled image ref %s, want the layout's config digest %s", id, busybox.ID)
	}
	if _, err := pull("registry.k8s.io/e2e-test-images/busybox:no-such-tag", nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("pull of a missing tag: %v, want not found", err)
	}
	// containerd 1.6 quotes the registry's 401; 2.x says it had no (or
	// refused) basic-auth credentials.
	denied := func(err error) bool {
		return err != nil && (strings.Contains(err.Error(), "401 Unauthorized") || strings.Contains(err.Error(), "authorization failed"))
	}
	if _, err := pull(privateRef, nil); !denied(err) {
		t.Errorf("private pull without credentials: %v, want 401 Unauthorized", err)
	}
	if _, err := pull(privateRef, &runtimeapi.AuthConfig{Username: "alice", Password: "wrong"}); !denied(err) {
		t.Errorf("private pull with a wrong password: %v, want 401 Unauthorized", err)
	} else {
		t.Logf("wrong password: %v", err)
	}
	if id, err := pull(privateRef, &runtimeapi.AuthConfig{Username: "alice", Password: "s3cret"}); err != nil || id != busybox.ID {
		t.Errorf("private pull with credentials: %s, %v; want %s", id, err, busybox.ID)
	}
	log, err := os.ReadFile(public.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	// With the mirror down a pull fails at the mirror: hosts.toml leaves
	// containerd no other host, the real registry included.
	if err := public.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = pull(NonRootImage, nil)
	if err == nil || !strings.Contains(err.Error(), public.Host) || strings.Contains(err.Error(), "https://registry.k8s.io") {
		t.Errorf("pull with the mirror down: %v; want a failure at %s only", err, public.Host)
	} else {
		t.Logf("mirror down: %v", err)
	}
	// containerd resolves the tag with a HEAD, naming the registry it
	// stands in for; that it came here is what the mirror is for.
	if want := `"HEAD /v2/e2e-test-images/busybox/manifests/1.37.0-2?ns=registry.k8s.io HTTP/1.1" 200`; !strings.Contains(string(log), want) {
		t.Errorf("the public registry's log has no %s", want)
	}
}
