package localcri

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Short names of the images only the conformance specs use (built with
// Config.ConformanceImages).
const (
	ImageNonewprivs = "nonewprivs"
	ImageNginx      = "nginx"
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
)

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
	}, nil
}

// buildNNP compiles nnpSource into a static binary under work.
func buildNNP(ctx context.Context, work string) (string, error) {
	dir := filepath.Join(work, "nnp")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module nnp\n\ngo 1.21\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(nnpSource), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nnp")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the nonewprivs program: %w: %s", err, out)
	}
	return bin, nil
}
