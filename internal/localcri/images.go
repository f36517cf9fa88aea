package localcri

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// Short names of the images BuildImages produces.
const (
	ImageBusybox  = "busybox"
	ImagePause    = "pause"
	ImageAgnhost  = "agnhost"
	ImageNonRoot  = "nonroot"
	ImageGlibcDNS = "glibc-dns-testing"
)

// Image references the local images are tagged with (besides the aliases
// listed by BuildImages' results).
const (
	SandboxImage = "registry.k8s.io/pause:3.10.1"
	BusyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	// NonRootImage is busybox whose image config names user 1234, as
	// upstream's nonroot test image.
	NonRootImage = "registry.k8s.io/e2e-test-images/nonroot:1.5"
	// GlibcDNSImage is busybox with the machine's glibc hostname(1), whose
	// -f resolves through /etc/hosts, as upstream's glibc-dns-testing.
	GlibcDNSImage = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"
)

// imageFormat is part of every cache key: bump it whenever the builder
// changes what it writes.
const imageFormat = "nodekit-localcri-images/v2"

// ImageTar is one OCI image layout tarball built by BuildImages.
type ImageTar struct {
	Name        string   // short name: ImageBusybox, ImagePause or ImageAgnhost
	Path        string   // the tarball in the cache directory
	Tags        []string // e.g. "registry.k8s.io/pause:3.10.1"
	RepoDigests []string // e.g. "registry.k8s.io/pause@sha256:..."
	Manifest    string   // digest of the image manifest, "sha256:..."
	ID          string   // digest of the image config (the CRI image id), "sha256:..."
}

// imageSpec describes one image to build.
type imageSpec struct {
	name       string
	tags       []string
	entrypoint []string
	cmd        []string
	user       string                                         // the config's User; "" is root
	extra      func(ctx context.Context) ([]fileEntry, error) // a second layer; nil for none
	inputs     []string                                       // what else goes into the cache key
}

// BuildImages builds (or finds in cacheDir) the busybox, pause and agnhost
// images as OCI image layout tarballs. The agnhost image needs binDir/agnhost,
// a static binary; without it that image is left out with a logged warning.
// Concurrent callers sharing cacheDir serialise on a lock file in it.
func BuildImages(ctx context.Context, cacheDir, binDir string) ([]ImageTar, error) {
	return buildImages(ctx, cacheDir, binDir, false)
}

// BuildConformanceImages is BuildImages plus the images only the
// conformance specs use (ImageNonewprivs, ImageNginx, ImageHostpathPlugin).
func BuildConformanceImages(ctx context.Context, cacheDir, binDir string) ([]ImageTar, error) {
	return buildImages(ctx, cacheDir, binDir, true)
}

func buildImages(ctx context.Context, cacheDir, binDir string, conformance bool) ([]ImageTar, error) {
	if cacheDir == "" {
		return nil, errors.New("build images: cacheDir is empty")
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("build images: create cache dir: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, ".lock"))
	if err != nil {
		return nil, fmt.Errorf("build images: lock cache dir: %w", err)
	}
	defer unlock()

	base, baseInputs, err := busyboxBase(ctx, binDir)
	if err != nil {
		return nil, fmt.Errorf("build images: %w", err)
	}
	specs, err := imageSpecs(ctx, cacheDir, binDir, baseInputs)
	if err != nil {
		return nil, fmt.Errorf("build images: %w", err)
	}
	b := &builder{cacheDir: cacheDir, base: base}
	defer b.cleanup()
	if conformance {
		more, err := conformanceSpecs(ctx, b.workDir)
		if err != nil {
			return nil, fmt.Errorf("build images: %w", err)
		}
		specs = append(specs, more...)
	}
	return b.buildAll(ctx, specs, baseInputs)
}

// busyboxBase is the layer every image starts from (busybox and its
// applets) and the inputs of every image's cache key.
func busyboxBase(ctx context.Context, binDir string) ([]fileEntry, []string, error) {
	busybox, err := findBusybox(binDir)
	if err != nil {
		return nil, nil, err
	}
	applets, err := busyboxApplets(ctx, busybox)
	if err != nil {
		return nil, nil, err
	}
	busyboxSum, err := fileDigest(busybox)
	if err != nil {
		return nil, nil, err
	}
	return baseLayer(busybox, applets), append([]string{imageFormat, runtime.GOARCH, busyboxSum}, applets...), nil
}

// imageSpecs lists the images BuildImages builds: busybox, nonroot and
// pause always, glibc-dns-testing when the host has its tools, agnhost
// when binDir has it.
func imageSpecs(ctx context.Context, cacheDir, binDir string, baseInputs []string) ([]imageSpec, error) {
	// /bin/sh is busybox's ash in every image but agnhost, as in upstream's
	// busybox-based and Alpine-based images.
	specs := []imageSpec{
		{
			name: ImageBusybox,
			tags: []string{BusyboxImage, "docker.io/library/busybox:latest", "docker.io/library/busybox:1.36"},
			cmd:  []string{"sh"},
		},
		{
			name: ImageNonRoot,
			tags: []string{NonRootImage},
			cmd:  []string{"sh"},
			user: "1234",
		},
		{
			name: ImagePause,
			tags: []string{SandboxImage, "registry.k8s.io/pause:3.10.2"},
			// Like upstream's pause: wait forever, exit 0 on SIGTERM or
			// SIGINT (a bare sleep as PID 1 would ignore them).
			entrypoint: []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 2147483647 & wait $!; done"},
		},
	}
	if tools, toolInputs, skipped, err := hostToolsLayer(ctx, glibcDNSTools); err != nil {
		return nil, fmt.Errorf("glibc-dns-testing tools: %w", err)
	} else if len(skipped) == 0 {
		specs = append(specs, imageSpec{
			name: ImageGlibcDNS, tags: []string{GlibcDNSImage}, cmd: []string{"sh"},
			extra:  func(context.Context) ([]fileEntry, error) { return tools, nil },
			inputs: toolInputs,
		})
	}
	agnhost, err := agnhostSpec(ctx, cacheDir, binDir, specs, baseInputs)
	if err != nil {
		return nil, err
	}
	return append(specs, agnhost...), nil
}

// agnhostSpec is the agnhost image (binDir/agnhost, the host tools
// upstream's image has, and the fake registry serving pause from
// others), or none with a logged warning when binDir has no agnhost.
func agnhostSpec(ctx context.Context, cacheDir, binDir string, others []imageSpec, baseInputs []string) ([]imageSpec, error) {
	logger := klog.FromContext(ctx)
	agnhost, err := findAgnhost(binDir)
	if err != nil {
		logger.Info("WARNING: leaving out the agnhost image", "reason", err.Error())
		return nil, nil
	}
	agnhostSum, err := fileDigest(agnhost)
	if err != nil {
		return nil, err
	}
	tools, toolInputs, skipped, err := hostToolsLayer(ctx, agnhostTools)
	if err != nil {
		return nil, fmt.Errorf("agnhost tools: %w", err)
	}
	if len(skipped) > 0 {
		logger.Info("WARNING: the agnhost image lacks tools upstream's has", "missing", skipped)
	}
	return []imageSpec{{
		name:       ImageAgnhost,
		tags:       []string{AgnhostImage},
		entrypoint: []string{"/agnhost"},
		cmd:        []string{"pause"},
		extra: func(context.Context) ([]fileEntry, error) {
			l, err := agnhostLayer(agnhost)
			reg, rerr := fakeRegistryLayer(cacheDir, others, baseInputs)
			return append(append(append(l, reg...), tools...), bashAsSh(skipped)...), errors.Join(err, rerr)
		},
		inputs: append(append([]string{agnhostSum, fakeRegistryInput(others, baseInputs)}, toolInputs...), bashAsShMarker(skipped)...),
	}}, nil
}

// buildAll returns each image of specs from the cache, or builds it
// (in order: agnhost's fake registry reads the pause image built before
// it) and drops older builds of it.
func (b *builder) buildAll(ctx context.Context, specs []imageSpec, baseInputs []string) ([]ImageTar, error) {
	logger := klog.FromContext(ctx)
	var out []ImageTar
	for _, s := range specs {
		key := cacheKey(s, baseInputs)
		if it, ok := readCached(b.cacheDir, s.name, key); ok {
			logger.V(2).Info("Using cached image", "image", s.name, "path", it.Path)
			out = append(out, it)
			continue
		}
		it, err := b.build(ctx, s, key)
		if err != nil {
			return nil, fmt.Errorf("build image %s: %w", s.name, err)
		}
		logger.Info("Built image", "image", s.name, "path", it.Path, "id", it.ID)
		pruneStale(b.cacheDir, s.name, key)
		out = append(out, it)
	}
	return out, nil
}

func cacheKey(s imageSpec, base []string) string {
	h := sha256.New()
	for _, parts := range [][]string{base, {s.name}, s.tags, s.entrypoint, {"--"}, s.cmd, {"--", s.user, "--"}, s.inputs} {
		for _, p := range parts {
			fmt.Fprintf(h, "%d:%s\n", len(p), p)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func cachePaths(cacheDir, name, key string) (tarPath, metaPath string) {
	stem := filepath.Join(cacheDir, name+"-"+key)
	return stem + ".tar", stem + ".json"
}

func readCached(cacheDir, name, key string) (ImageTar, bool) {
	tarPath, metaPath := cachePaths(cacheDir, name, key)
	data, err := os.ReadFile(metaPath)
	if err != nil {
		return ImageTar{}, false
	}
	var it ImageTar
	if json.Unmarshal(data, &it) != nil || it.Name != name {
		return ImageTar{}, false
	}
	if _, err := os.Stat(tarPath); err != nil {
		return ImageTar{}, false
	}
	it.Path = tarPath
	return it, true
}

// pruneStale removes tarballs of an image built from older inputs.
func pruneStale(cacheDir, name, key string) {
	keep, keepMeta := cachePaths(cacheDir, name, key)
	matches, _ := filepath.Glob(filepath.Join(cacheDir, name+"-*"))
	for _, m := range matches {
		if m != keep && m != keepMeta && (strings.HasSuffix(m, ".tar") || strings.HasSuffix(m, ".json")) {
			_ = os.Remove(m)
		}
	}
}

// builder holds the temporary blobs of one BuildImages call.
type builder struct {
	cacheDir  string
	base      []fileEntry
	work      string
	baseLayer *layerBlob
}

func (b *builder) cleanup() {
	if b.work != "" {
		_ = os.RemoveAll(b.work)
	}
}

// workDir returns the builder's work directory under the cache dir,
// created on first use and removed by cleanup.
func (b *builder) workDir() (string, error) {
	if b.work == "" {
		dir, err := os.MkdirTemp(b.cacheDir, ".build-*")
		if err != nil {
			return "", fmt.Errorf("create work dir: %w", err)
		}
		b.work = dir
	}
	return b.work, nil
}

func (b *builder) build(ctx context.Context, s imageSpec, key string) (ImageTar, error) {
	layers, err := b.layers(ctx, s)
	if err != nil {
		return ImageTar{}, err
	}
	cfg, err := json.Marshal(newImageConfig(s, layers))
	if err != nil {
		return ImageTar{}, fmt.Errorf("encode config: %w", err)
	}
	cfgBlob, err := writeBlob(b.work, cfg)
	if err != nil {
		return ImageTar{}, err
	}
	man := manifest{SchemaVersion: 2, MediaType: mediaTypeManifest,
		Config: descriptor{MediaType: mediaTypeConfig, Digest: cfgBlob.digest, Size: cfgBlob.size}}
	for _, l := range layers {
		man.Layers = append(man.Layers, descriptor{MediaType: mediaTypeLayer, Digest: l.digest, Size: l.size})
	}
	manData, err := json.Marshal(man)
	if err != nil {
		return ImageTar{}, fmt.Errorf("encode manifest: %w", err)
	}
	manBlob, err := writeBlob(b.work, manData)
	if err != nil {
		return ImageTar{}, err
	}

	it := ImageTar{Name: s.name, Tags: s.tags, Manifest: manBlob.digest, ID: cfgBlob.digest}
	it.RepoDigests = repoDigests(s.tags, manBlob.digest)
	idxData, err := json.Marshal(imageIndex(it, manBlob))
	if err != nil {
		return ImageTar{}, fmt.Errorf("encode index: %w", err)
	}
	blobs := []blob{cfgBlob, manBlob}
	for _, l := range layers {
		blobs = append(blobs, l.blob)
	}
	return b.save(it, key, idxData, blobs)
}

// layers writes the blobs of an image's layers: the shared busybox
// layer (once per builder), then the image's own, if any.
func (b *builder) layers(ctx context.Context, s imageSpec) ([]layerBlob, error) {
	if _, err := b.workDir(); err != nil {
		return nil, err
	}
	if b.baseLayer == nil {
		l, err := writeLayer(ctx, b.work, b.base)
		if err != nil {
			return nil, fmt.Errorf("busybox layer: %w", err)
		}
		b.baseLayer = &l
	}
	layers := []layerBlob{*b.baseLayer}
	if s.extra == nil {
		return layers, nil
	}
	entries, err := s.extra(ctx)
	if err != nil {
		return nil, err
	}
	l, err := writeLayer(ctx, b.work, entries)
	if err != nil {
		return nil, fmt.Errorf("%s layer: %w", s.name, err)
	}
	return append(layers, l), nil
}

// imageIndex is the layout's index: the manifest once under each of the
// image's tags and repo digests.
func imageIndex(it ImageTar, manBlob blob) index {
	idx := index{SchemaVersion: 2, MediaType: mediaTypeIndex}
	for _, ref := range append(append([]string(nil), it.Tags...), it.RepoDigests...) {
		d := descriptor{MediaType: mediaTypeManifest, Digest: manBlob.digest, Size: manBlob.size,
			Platform:    &platform{Architecture: runtime.GOARCH, OS: "linux"},
			Annotations: map[string]string{annotationImageName: ref}}
		if _, tag, ok := splitTag(ref); ok {
			d.Annotations[annotationRefName] = tag
		}
		idx.Manifests = append(idx.Manifests, d)
	}
	return idx
}

// save writes the image's layout tarball and its metadata to the cache.
func (b *builder) save(it ImageTar, key string, idxData []byte, blobs []blob) (ImageTar, error) {
	tarPath, metaPath := cachePaths(b.cacheDir, it.Name, key)
	if err := fsutil.WriteAtomic(tarPath, 0o644, func(w io.Writer) error { return writeLayout(w, idxData, blobs) }); err != nil {
		return ImageTar{}, fmt.Errorf("write %s: %w", tarPath, err)
	}
	meta, err := json.MarshalIndent(it, "", "  ")
	if err != nil {
		return ImageTar{}, fmt.Errorf("encode image metadata: %w", err)
	}
	if err := fsutil.WriteFileAtomic(metaPath, meta, 0o644); err != nil {
		return ImageTar{}, fmt.Errorf("write %s: %w", metaPath, err)
	}
	it.Path = tarPath
	return it, nil
}

// splitTag splits "repo:tag" (not "repo@digest") into its parts.
func splitTag(ref string) (repo, tag string, ok bool) {
	if strings.Contains(ref, "@") {
		return "", "", false
	}
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return "", "", false
	}
	return ref[:i], ref[i+1:], true
}

func repoDigests(tags []string, digest string) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range tags {
		repo, _, ok := splitTag(t)
		if !ok || seen[repo] {
			continue
		}
		seen[repo] = true
		out = append(out, repo+"@"+digest)
	}
	sort.Strings(out)
	return out
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return digestOf(h), nil
}

// findBusybox returns binDir/busybox, the static upstream busybox
// hack/build-busybox.sh builds: Debian's busybox-static is not used, its
// ash drops environment variables whose names are not identifiers and
// prefers its applets to the PATH.
func findBusybox(binDir string) (string, error) {
	if binDir == "" {
		return "", errors.New("no bin dir for busybox (set NODEKIT_BIN_DIR or run inside the nodekit module)")
	}
	p := filepath.Join(binDir, "busybox")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("busybox binary (build it with hack/build-tools.sh busybox): %w", err)
	}
	if err := checkStatic(p); err != nil {
		return "", fmt.Errorf("busybox: %w (build it with hack/build-tools.sh busybox)", err)
	}
	return p, nil
}

func findAgnhost(binDir string) (string, error) {
	if binDir == "" {
		return "", errors.New("no bin dir (set NODEKIT_BIN_DIR or run inside the nodekit module)")
	}
	p := filepath.Join(binDir, "agnhost")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("agnhost binary: %w", err)
	}
	if err := checkStatic(p); err != nil {
		return "", fmt.Errorf("agnhost: %w (build it with CGO_ENABLED=0)", err)
	}
	return p, nil
}

// checkStatic fails for an ELF binary that needs a dynamic loader: the
// images have no libc.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF binary: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}

func busyboxApplets(ctx context.Context, busybox string) ([]string, error) {
	out, err := exec.CommandContext(ctx, busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", busybox, err)
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			applets = append(applets, a)
		}
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("%s --list printed no applets", busybox)
	}
	sort.Strings(applets)
	return applets, nil
}
