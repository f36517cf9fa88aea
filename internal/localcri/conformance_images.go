package localcri

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Short names of the images only the conformance specs use (built with
// Config.ConformanceImages).
const (
	ImageNonewprivs = "nonewprivs"
	ImageNginx      = "nginx"
	// ImageHostpathPlugin is the stand-in for csi-driver-host-path's
	// hostpathplugin that the DRA specs run in proxy mode.
	ImageHostpathPlugin = "hostpathplugin"
)

// Image references of the conformance-only images.
const (
	// NonewprivsImage runs a setuid-root program that prints its
	// effective uid ("Effective uid: N"), as upstream's nonewprivs image:
	// the AllowPrivilegeEscalation specs read it.
	NonewprivsImage = "registry.k8s.io/e2e-test-images/nonewprivs:1.4"
	// NginxImage serves HTTP on port 80 (busybox httpd) from
	// /usr/share/nginx/html, with the busybox shell (ash, as in upstream's
	// Alpine-based nginx image) and tools beside it: the specs that switch
	// a pod to nginx still run their own command.
	NginxImage    = "registry.k8s.io/e2e-test-images/nginx:1.27.0-2"
	NginxNewImage = "registry.k8s.io/e2e-test-images/nginx:1.28.0-2"
	// HostpathPluginImage is /hostpathplugin, the program in
	// ./hostpathplugin (proxy mode only: a unix socket paired with a TCP
	// port), with busybox's sh, base64, mkdir, mv, rm and test beside it.
	// The DRA e2e specs (test/e2e/dra/utils/deploy.go) run the newest
	// hostpathplugin of e2e.test's storage-csi manifests, v1.17.1 in
	// v1.37.2, as their kubelet-plugin proxy pod.
	HostpathPluginImage = "registry.k8s.io/sig-storage/hostpathplugin:v1.17.1"
)

// hostpathPluginSource is the source of the hostpathplugin program, built
// in a module of its own (it needs the standard library only).
//
//go:embed hostpathplugin/main.go hostpathplugin/proxy.go
var hostpathPluginSource embed.FS

// nnpSource is the program of the nonewprivs image, built static for the
// image by the go command on the PATH.
const nnpSource = `package main

import (
	"fmt"
	"os"
)

// Prints the effective uid: 0 when the setuid bit took effect, the
// caller's uid when no_new_privs kept it from doing so.
func main() { fmt.Printf("Effective uid: %d\n", os.Geteuid()) }
`

// conformanceSpecs returns the specs of the conformance-only images. The
// nonewprivs program is compiled into work (the builder's directory) when
// that image is built, not before.
func conformanceSpecs(ctx context.Context, work func() (string, error)) ([]imageSpec, error) {
	goVersion, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return nil, fmt.Errorf("the nonewprivs image needs the go command: %w", err)
	}
	hostpath, err := hostpathPluginFiles()
	if err != nil {
		return nil, err
	}
	var hostpathInputs []string
	for _, name := range slices.Sorted(maps.Keys(hostpath)) {
		hostpathInputs = append(hostpathInputs, name, string(hostpath[name]))
	}
	nginxHTML := []fileEntry{
		dirEntry("usr/share", 0o755), dirEntry("usr/share/nginx", 0o755), dirEntry("usr/share/nginx/html", 0o755),
		fileData("usr/share/nginx/html/index.html", 0o644, []byte("<html><body>nodekit localcri nginx stand-in</body></html>\n")),
	}
	return []imageSpec{
		{
			name: ImageNonewprivs, tags: []string{NonewprivsImage}, cmd: []string{"nnp"},
			extra: func(ctx context.Context) ([]fileEntry, error) {
				dir, err := work()
				if err != nil {
					return nil, err
				}
				bin, err := buildNNP(ctx, dir)
				if err != nil {
					return nil, err
				}
				return []fileEntry{dirEntry("usr/local", 0o755), dirEntry("usr/local/bin", 0o755),
					fileFrom("usr/local/bin/nnp", 0o4755, bin)}, nil
			},
			inputs: []string{nnpSource, strings.TrimSpace(string(goVersion))},
		},
		{
			name: ImageNginx, tags: []string{NginxImage, NginxNewImage},
			entrypoint: []string{"httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"},
			extra:      func(context.Context) ([]fileEntry, error) { return nginxHTML, nil },
			inputs:     []string{"nginx/v2"},
		},
		{
			name: ImageHostpathPlugin, tags: []string{HostpathPluginImage}, entrypoint: []string{"/hostpathplugin"},
			extra: func(ctx context.Context) ([]fileEntry, error) {
				dir, err := work()
				if err != nil {
					return nil, err
				}
				bin, err := buildHostpathPlugin(ctx, dir)
				if err != nil {
					return nil, err
				}
				return []fileEntry{fileFrom("hostpathplugin", 0o755, bin)}, nil
			},
			inputs: append([]string{strings.TrimSpace(string(goVersion))}, hostpathInputs...),
		},
	}, nil
}

// buildNNP compiles nnpSource into a static binary under work.
func buildNNP(ctx context.Context, work string) (string, error) {
	return buildStatic(ctx, work, "nnp", map[string][]byte{"main.go": []byte(nnpSource)})
}

// buildHostpathPlugin compiles the hostpathplugin program into a static
// binary under work.
func buildHostpathPlugin(ctx context.Context, work string) (string, error) {
	files, err := hostpathPluginFiles()
	if err != nil {
		return "", err
	}
	return buildStatic(ctx, work, "hostpathplugin", files)
}

// hostpathPluginFiles reads the program's embedded source, by file name.
func hostpathPluginFiles() (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(hostpathPluginSource, "hostpathplugin", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := hostpathPluginSource.ReadFile(path)
		files[d.Name()] = data
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the hostpathplugin source: %w", err)
	}
	return files, nil
}

// buildStatic writes a main package of the standard library only into
// work/name, as a module of its own, and builds it static (CGO_ENABLED=0:
// the images have no libc) with the go command on the PATH.
func buildStatic(ctx context.Context, work, name string, files map[string][]byte) (string, error) {
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	files["go.mod"] = []byte("module " + name + "\n\ngo 1.25\n")
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the %s program: %w: %s", name, err, out)
	}
	return bin, nil
}
