package localcri

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// registryFiles returns the regular files (content) and modes of every
// entry under var/registry in the layers of an image layout tarball.
func registryFiles(t *testing.T, layoutTar string) (files map[string][]byte, modes map[string]int64) {
	t.Helper()
	blobs, err := readLayoutBlobs(layoutTar)
	if err != nil {
		t.Fatal(err)
	}
	files, modes = map[string][]byte{}, map[string]int64{}
	// The layout's index.json is not a blob: find the manifest among the
	// blobs by its media type.
	for _, b := range blobs {
		var m manifest
		if json.Unmarshal(b, &m) != nil || m.MediaType != mediaTypeManifest {
			continue
		}
		for _, l := range m.Layers {
			gz, err := gzip.NewReader(bytes.NewReader(blobs[l.Digest]))
			if err != nil {
				t.Fatal(err)
			}
			tr := tar.NewReader(gz)
			for {
				h, err := tr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				name := strings.TrimSuffix(h.Name, "/")
				if !strings.HasPrefix(name, fakeRegistryRoot) {
					continue
				}
				modes[name] = h.Mode
				if h.Typeflag == tar.TypeReg {
					data, err := io.ReadAll(tr)
					if err != nil {
						t.Fatal(err)
					}
					files[name] = data
				}
			}
		}
	}
	return files, modes
}

// TestAgnhostFakeRegistry checks the agnhost image's /var/registry: the
// tag file names the pause image's manifest, and the manifest and every
// blob it names are there, in the layout fake-registry-server reads, with
// content matching their digests, readable by any uid.
func TestAgnhostFakeRegistry(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	images, err := BuildImages(ctx, t.TempDir(), fakeBinDir(t))
	if err != nil {
		t.Fatal(err)
	}
	var pause, agnhost ImageTar
	for _, it := range images {
		switch it.Name {
		case ImagePause:
			pause = it
		case ImageAgnhost:
			agnhost = it
		}
	}
	if pause.Path == "" || agnhost.Path == "" {
		t.Fatalf("built %v: want pause and agnhost", images)
	}
	files, modes := registryFiles(t, agnhost.Path)
	top := "var/registry/pause"
	if tag := string(files[top+"/manifests/testing"]); tag != pause.Manifest+"\n" {
		t.Fatalf("tag file testing = %q, want the pause manifest %s", tag, pause.Manifest)
	}
	at := func(dir, digest string) string {
		h := strings.TrimPrefix(digest, "sha256:")
		return path.Join(top, dir, "sha256", h[:2], h, "data")
	}
	check := func(p, digest string) []byte {
		data, ok := files[p]
		if !ok {
			t.Fatalf("%s missing (have %d files)", p, len(files))
		}
		sum := sha256.Sum256(data)
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
			t.Errorf("%s has digest %s, want %s", p, got, digest)
		}
		return data
	}
	var m manifest
	if err := json.Unmarshal(check(at("manifests", pause.Manifest), pause.Manifest), &m); err != nil {
		t.Fatal(err)
	}
	if m.MediaType == "" || m.Config.Digest != pause.ID || len(m.Layers) == 0 {
		t.Errorf("manifest = %+v: want a mediaType (the server's Content-Type), config %s and layers", m, pause.ID)
	}
	for _, d := range append([]descriptor{m.Config}, m.Layers...) {
		check(at("blobs", d.Digest), d.Digest)
	}
	for name, mode := range modes {
		if mode&0o004 == 0 {
			t.Errorf("%s mode %o: not world-readable (the registry pod runs as uid 5123)", name, mode)
		}
	}
	// The cache key follows the pause image: a rebuild with the same
	// inputs finds the cached agnhost, whose registry is the same.
	again, err := BuildImages(ctx, t.TempDir(), fakeBinDir(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range again {
		if it.Name == ImageAgnhost && it.Manifest != agnhost.Manifest {
			t.Errorf("agnhost rebuilt as %s, was %s: the registry layer is not deterministic", it.Manifest, agnhost.Manifest)
		}
	}
}

func TestValidateLocalhost(t *testing.T) {
	for _, ok := range [][]string{nil, {"localhost:5000"}, {"localhost:5000", "localhost:5001"}} {
		if err := validateLocalhost(ok); err != nil {
			t.Errorf("validateLocalhost(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"127.0.0.1:5000", "localhost", "registry.k8s.io:5000", "localhost:0", "localhost:x", "localhost:70000"} {
		if err := validateLocalhost([]string{bad}); err == nil || !strings.Contains(err.Error(), "LocalhostRegistries[0]") {
			t.Errorf("validateLocalhost(%q) = %v, want an error naming the field", bad, err)
		}
	}
}

// TestLocalhostHostsTOML checks that a localhost name gets plain HTTP to
// itself while other localhost ports stay blackholed by _default.
func TestLocalhostHostsTOML(t *testing.T) {
	l := newLayout(t.TempDir())
	if err := writeRegistryConfig(l); err != nil {
		t.Fatal(err)
	}
	if err := writeLocalhostConfig(l, []string{"localhost:5000"}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(l.registries + "/localhost:5000/hosts.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`server = "http://localhost:5000"`, `[host."http://localhost:5000"]`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("hosts.toml lacks %s:\n%s", want, data)
		}
	}
	if _, err := os.Stat(l.registries + "/localhost:5001"); err == nil {
		t.Error("localhost:5001 has a hosts.toml; only the listed names may")
	}
}

func TestImagesToImportPreload(t *testing.T) {
	all := []ImageTar{{Name: ImageBusybox}, {Name: ImagePause}, {Name: ImageAgnhost}}
	if got := imagesToImport(all, []Mirror{{Host: "127.0.0.1:1"}}, true); len(got) != 3 {
		t.Errorf("with mirrors and preload: %v, want all", got)
	}
}
