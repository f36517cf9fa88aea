package localcri

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/internal/itest"
)

// testBusybox returns a static busybox for the image builder's unit
// tests: the built one in the bin dir, else the machine's busybox-static
// (what the layout tests check does not depend on which busybox it is).
func testBusybox(t *testing.T) string {
	t.Helper()
	if bb, err := findBusybox(resolveBinDir("")); err == nil {
		return bb
	}
	p, err := exec.LookPath("busybox")
	if err == nil {
		p, err = filepath.EvalSymlinks(p)
	}
	if err == nil {
		err = checkStatic(p)
	}
	itest.Require(t, "a static busybox (hack/build-tools.sh busybox, or Debian's busybox-static)", err)
	return p
}

// fakeBinDir holds busybox and a static binary named agnhost (busybox
// again: the builder only checks that it is static).
func fakeBinDir(t *testing.T) string {
	t.Helper()
	dir := binDirWith(t, testBusybox(t))
	copyFile(t, filepath.Join(dir, "busybox"), filepath.Join(dir, "agnhost"))
	return dir
}

// binDirWith is a temporary bin dir holding a copy of busybox.
func binDirWith(t *testing.T, busybox string) string {
	t.Helper()
	dir := t.TempDir()
	copyFile(t, busybox, filepath.Join(dir, "busybox"))
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// Without bin/busybox BuildImages fails and names the build command.
func TestBuildImagesWithoutBusybox(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	_, err := BuildImages(ctx, t.TempDir(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "hack/build-tools.sh busybox") {
		t.Fatalf("BuildImages without busybox: err = %v, want one naming hack/build-tools.sh busybox", err)
	}
}

// Another busybox gives the images another cache key: they are rebuilt.
func TestBuildImagesRebuildsForAnotherBusybox(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	bin := binDirWith(t, testBusybox(t))
	cache := t.TempDir()
	a, err := BuildImages(ctx, cache, bin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(bin, "busybox"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0}); err != nil { // still a static ELF, another digest
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := BuildImages(ctx, cache, bin)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i].Name == b[i].Name && a[i].Manifest == b[i].Manifest {
			t.Errorf("image %s: same manifest %s from another busybox", a[i].Name, a[i].Manifest)
		}
	}
}

func TestBuildImagesDeterministic(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	bin := fakeBinDir(t)
	a, err := BuildImages(ctx, t.TempDir(), bin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := BuildImages(ctx, t.TempDir(), bin)
	if err != nil {
		t.Fatal(err)
	}
	want := 4
	if _, err := os.Stat(glibcDNSTools[0].host); err == nil {
		want++
	}
	if len(a) != want || len(b) != want {
		t.Fatalf("want %d images, got %d and %d", want, len(a), len(b))
	}
	for i := range a {
		if a[i].Manifest != b[i].Manifest || a[i].ID != b[i].ID {
			t.Errorf("image %s: digests differ between builds: %s/%s vs %s/%s",
				a[i].Name, a[i].Manifest, a[i].ID, b[i].Manifest, b[i].ID)
		}
	}

	// A second call on the same cache reuses the tarballs.
	again, err := BuildImages(ctx, filepath.Dir(a[0].Path), bin)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if again[i].Path != a[i].Path || again[i].Manifest != a[i].Manifest {
			t.Errorf("image %s: cache not reused: %+v vs %+v", a[i].Name, again[i], a[i])
		}
	}
}

func TestBuildImagesWithoutAgnhost(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	images, err := BuildImages(ctx, t.TempDir(), binDirWith(t, testBusybox(t)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, it := range images {
		names = append(names, it.Name)
	}
	want := []string{ImageBusybox, ImageNonRoot, ImagePause}
	if _, err := os.Stat(glibcDNSTools[0].host); err == nil {
		want = append(want, ImageGlibcDNS)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("images = %v, want %v", names, want)
	}
}

func TestImageContents(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	images, err := BuildImages(ctx, t.TempDir(), fakeBinDir(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range images {
		files, cfg, names := readLayout(t, it.Path)
		for _, tag := range it.Tags {
			if !slices.Contains(names, tag) {
				t.Errorf("%s: index lacks %s (has %v)", it.Name, tag, names)
			}
		}
		for _, want := range []string{"bin/busybox", "bin/sh", "bin/sleep", "etc/passwd", "etc/group", "tmp/", "etc/hosts", "etc/resolv.conf"} {
			if _, ok := files[want]; !ok {
				t.Errorf("%s: rootfs lacks %s", it.Name, want)
			}
		}
		if h := files["tmp/"]; h != nil && h.Mode&0o7777 != 0o1777 {
			t.Errorf("%s: /tmp mode = %o", it.Name, h.Mode)
		}
		wantSh := "busybox" // ash, as in upstream's busybox and Alpine images
		if _, err := os.Stat(agnhostTools[0].host); err == nil && it.Name == ImageAgnhost {
			wantSh = "bash" // see bashAsSh
			if h := files["bin/bash"]; h == nil || h.Typeflag != tar.TypeReg {
				t.Errorf("%s: /bin/bash = %+v", it.Name, h)
			}
		} else if _, ok := files["bin/bash"]; ok {
			t.Errorf("%s: has /bin/bash, want busybox alone", it.Name)
		}
		if h := files["bin/sh"]; h != nil && (h.Typeflag != tar.TypeSymlink || h.Linkname != wantSh) {
			t.Errorf("%s: /bin/sh = %+v, want a link to %s", it.Name, h, wantSh)
		}
		c := cfg.Config
		switch it.Name {
		case ImageBusybox:
			if !slices.Equal(c.Cmd, []string{"sh"}) || c.Entrypoint != nil {
				t.Errorf("busybox config = %+v", c)
			}
		case ImagePause:
			if len(c.Entrypoint) != 3 || c.Entrypoint[0] != "/bin/sh" || !strings.Contains(c.Entrypoint[2], "trap 'exit 0' TERM") {
				t.Errorf("pause config = %+v", c)
			}
		case ImageGlibcDNS:
			if h := files["bin/hostname"]; h == nil || h.Typeflag != tar.TypeReg {
				t.Errorf("glibc-dns-testing: bin/hostname = %+v, want the machine's binary", h)
			}
		case ImageNonRoot:
			if c.User != "1234" || !slices.Equal(c.Cmd, []string{"sh"}) {
				t.Errorf("nonroot config = %+v", c)
			}
		case ImageAgnhost:
			if !slices.Equal(c.Entrypoint, []string{"/agnhost"}) || !slices.Equal(c.Cmd, []string{"pause"}) {
				t.Errorf("agnhost config = %+v", c)
			}
			want := []string{"agnhost", "agnhost-2", "uploads/", "localhost.crt", "localhost.key"}
			for _, tool := range agnhostTools {
				if _, err := os.Stat(tool.host); err == nil {
					want = append(want, tool.image)
				}
			}
			for _, want := range want {
				if _, ok := files[want]; !ok {
					t.Errorf("agnhost: rootfs lacks %s", want)
				}
			}
			if h := files["agnhost-2"]; h != nil && h.Linkname != "agnhost" {
				t.Errorf("agnhost-2 -> %q", h.Linkname)
			}
		}
	}
}

// readLayout returns the merged rootfs headers, the image config and the
// image names of an OCI layout tarball.
func readLayout(t *testing.T, path string) (map[string]*tar.Header, imageConfig, []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	blobs := map[string][]byte{}
	var idx index
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case h.Name == "index.json":
			if err := json.Unmarshal(data, &idx); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(h.Name, "blobs/sha256/") && h.Typeflag == tar.TypeReg:
			blobs["sha256:"+strings.TrimPrefix(h.Name, "blobs/sha256/")] = data
		}
	}
	var names []string
	for _, d := range idx.Manifests {
		names = append(names, d.Annotations[annotationImageName])
	}
	var man manifest
	if err := json.Unmarshal(blobs[idx.Manifests[0].Digest], &man); err != nil {
		t.Fatal(err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blobs[man.Config.Digest], &cfg); err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	for _, l := range man.Layers {
		zr, err := gzip.NewReader(strings.NewReader(string(blobs[l.Digest])))
		if err != nil {
			t.Fatal(err)
		}
		lr := tar.NewReader(zr)
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = h
		}
	}
	return files, cfg, names
}

// The conformance-only images: nonewprivs' program is setuid root and
// prints its effective uid (0 when the bit takes effect, the caller's uid
// under no_new_privs, as the AllowPrivilegeEscalation specs read it);
// nginx serves /usr/share/nginx/html on port 80 with the shell beside it;
// hostpathplugin is /hostpathplugin with the busybox applets the DRA specs
// exec.
func TestConformanceImages(t *testing.T) {
	itest.Short(t, "building the conformance images (compiles a program)")
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	images, err := BuildConformanceImages(ctx, t.TempDir(), fakeBinDir(t))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, it := range images {
		files, cfg, _ := readLayout(t, it.Path)
		switch it.Name {
		case ImageNonewprivs:
			h := files["usr/local/bin/nnp"]
			if h == nil || h.Mode&0o7777 != 0o4755 || h.Uid != 0 {
				t.Errorf("nonewprivs: usr/local/bin/nnp = %+v, want root-owned mode 4755", h)
			}
			if !slices.Equal(cfg.Config.Cmd, []string{"nnp"}) {
				t.Errorf("nonewprivs config = %+v", cfg.Config)
			}
		case ImageNginx:
			if _, ok := files["usr/share/nginx/html/index.html"]; !ok || !slices.Contains(it.Tags, NginxNewImage) {
				t.Errorf("nginx: index.html present %v, tags %v", ok, it.Tags)
			}
			if c := cfg.Config.Entrypoint; len(c) < 3 || c[0] != "httpd" || c[2] != "-p" {
				t.Errorf("nginx config = %+v", cfg.Config)
			}
		case ImageHostpathPlugin:
			if h := files["hostpathplugin"]; h == nil || h.Mode&0o777 != 0o755 || h.Typeflag != tar.TypeReg {
				t.Errorf("hostpathplugin: /hostpathplugin = %+v, want an executable file", h)
			}
			for _, a := range []string{"sh", "base64", "mkdir", "mv", "rm", "test", "sleep", "cat", "ls"} {
				if files["bin/"+a] == nil {
					t.Errorf("hostpathplugin: no bin/%s", a)
				}
			}
			if !slices.Equal(it.Tags, []string{HostpathPluginImage}) || !slices.Equal(cfg.Config.Entrypoint, []string{"/hostpathplugin"}) {
				t.Errorf("hostpathplugin: tags %v, config %+v", it.Tags, cfg.Config)
			}
		}
		found[it.Name] = true
	}
	if !found[ImageNonewprivs] || !found[ImageNginx] || !found[ImageHostpathPlugin] {
		t.Fatalf("built %v, want nonewprivs, nginx and hostpathplugin among them", found)
	}

	setpriv, err := exec.LookPath("setpriv")
	if err == nil && os.Geteuid() != 0 {
		err = errors.New("not root")
	}
	itest.Require(t, "setpriv and root (to run the nonewprivs program as another user)", err)
	bin, err := buildNNP(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A temp dir on a nosuid mount is a property of the host, not of the
	// program; it is found before the run, so a program that ignores its
	// setuid bit still fails below. Like any other missing requirement it
	// fails the test under NODEKIT_REQUIRE_INTEGRATION (point TMPDIR at a
	// mount without nosuid).
	itest.Require(t, "a temp dir that honours setuid", honoursSetuid(filepath.Dir(bin)))
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(filepath.Dir(bin)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--reuid=1000", "--regid=1000", "--clear-groups", bin}, "Effective uid: 0\n"},
		{[]string{"--reuid=1000", "--regid=1000", "--clear-groups", "--no-new-privs", bin}, "Effective uid: 1000\n"},
	} {
		out, err := exec.CommandContext(ctx, setpriv, c.args...).CombinedOutput()
		if err != nil {
			t.Fatalf("setpriv %v: %v: %s", c.args, err, out)
		}
		if string(out) != c.want {
			t.Errorf("setpriv %v: %q, want %q", c.args, out, c.want)
		}
	}
}

// honoursSetuid says why a setuid binary in dir would not run with its
// owner's uid: dir is on a file system mounted nosuid.
func honoursSetuid(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if st.Flags&unix.ST_NOSUID != 0 {
		return fmt.Errorf("%s is on a file system mounted nosuid", dir)
	}
	return nil
}
