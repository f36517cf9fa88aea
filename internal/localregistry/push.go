package localregistry

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// OCI layout names and media types Push reads.
const (
	annotationImageName = "io.containerd.image.name"
	blobPrefix          = "blobs/sha256/"
	// maxManifestSize is the largest blob readLayout keeps in memory as a
	// possible manifest.
	maxManifestSize = 4 << 20
)

// indexFile is the part of an OCI layout's index.json Push reads.
type indexFile struct {
	Manifests []struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Annotations map[string]string `json:"annotations"`
	} `json:"manifests"`
}

// layout is what Push keeps of one tarball: the manifests (small) in
// memory, by digest, and the names the index gives them.
type layout struct {
	index     indexFile
	manifests map[string][]byte // digest -> manifest bytes
}

// Push uploads the image of an OCI image layout tarball under each of
// refs ("registry.k8s.io/e2e-test-images/busybox:1.37.0-2"): its blobs,
// then its manifest under each tag. The registry host of a ref is not
// part of the repository: a containerd mirror for registry.k8s.io asks for
// /v2/e2e-test-images/busybox/..., and a bare "busybox" is Docker Hub's
// library/busybox. Without refs it pushes under every
// io.containerd.image.name the index names. Blobs already there are not
// sent again. It blocks on the uploads; it is idempotent.
func (r *Registry) Push(ctx context.Context, layoutTar string, refs ...string) error {
	l, err := readLayout(layoutTar)
	if err != nil {
		return fmt.Errorf("push %s: %w", layoutTar, err)
	}
	if len(refs) == 0 {
		for _, m := range l.index.Manifests {
			if n := m.Annotations[annotationImageName]; n != "" && !strings.Contains(n, "@") {
				refs = append(refs, n)
			}
		}
	}
	if len(refs) == 0 {
		return fmt.Errorf("push %s: no reference given and the index names none", layoutTar)
	}
	// Every ref gets the index's first manifest: the layouts this
	// package reads hold one image for one platform.
	m := l.index.Manifests[0]
	var repos, tags []string
	for _, ref := range refs {
		repo, tag, err := ParseReference(ref)
		if err != nil {
			return fmt.Errorf("push %s: %w", layoutTar, err)
		}
		repos, tags = append(repos, repo), append(tags, tag)
	}
	if err := r.uploadBlobs(ctx, layoutTar, l, uniq(repos)); err != nil {
		return fmt.Errorf("push %s: %w", layoutTar, err)
	}
	for i := range repos {
		if err := r.putManifest(ctx, repos[i], tags[i], m.MediaType, l.manifests[m.Digest]); err != nil {
			return fmt.Errorf("push %s as %s: %w", layoutTar, refs[i], err)
		}
	}
	return nil
}

func uniq(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// ParseReference splits an image reference into the repository path a
// registry mirror serves it under and its tag (default "latest"):
// "registry.k8s.io/pause:3.10.1" -> ("pause", "3.10.1"),
// "busybox" -> ("library/busybox", "latest"). Digest references are
// refused: Push tags what it pushes.
func ParseReference(ref string) (repo, tag string, err error) {
	if ref == "" || strings.Contains(ref, "@") {
		return "", "", fmt.Errorf("image reference %q: want NAME[:TAG]", ref)
	}
	name, tag := ref, "latest"
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], ref[i+1:]
	}
	parts := strings.SplitN(name, "/", 2)
	host := ""
	if len(parts) == 2 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		host, name = parts[0], parts[1]
	}
	if (host == "" || host == "docker.io") && !strings.Contains(name, "/") {
		name = "library/" + name
	}
	if name == "" || tag == "" || name != strings.ToLower(name) {
		return "", "", fmt.Errorf("image reference %q: bad repository or tag", ref)
	}
	return name, tag, nil
}

// readLayout reads index.json and the manifests it names from the
// tarball.
func readLayout(path string) (layout, error) {
	l := layout{manifests: map[string][]byte{}}
	small := map[string][]byte{} // blobs small enough to be a manifest
	err := walkTar(path, func(name string, size int64, r io.Reader) error {
		switch {
		case name == "index.json":
			if err := json.NewDecoder(r).Decode(&l.index); err != nil {
				return fmt.Errorf("index.json: %w", err)
			}
		case strings.HasPrefix(name, blobPrefix) && size <= maxManifestSize:
			data, err := io.ReadAll(r)
			if err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			small["sha256:"+strings.TrimPrefix(name, blobPrefix)] = data
		}
		return nil
	})
	if err != nil {
		return l, err
	}
	if len(l.index.Manifests) == 0 {
		return l, errors.New("index.json names no manifest")
	}
	for _, m := range l.index.Manifests {
		data, ok := small[m.Digest]
		if !ok {
			return l, fmt.Errorf("manifest %s is not in the layout", m.Digest)
		}
		l.manifests[m.Digest] = data
	}
	return l, nil
}

// uploadBlobs sends every blob of the tarball but the manifests to the
// first of repos, streaming it from the file, and mounts it into the
// others.
func (r *Registry) uploadBlobs(ctx context.Context, path string, l layout, repos []string) error {
	return walkTar(path, func(name string, size int64, rd io.Reader) error {
		if !strings.HasPrefix(name, blobPrefix) {
			return nil
		}
		digest := "sha256:" + strings.TrimPrefix(name, blobPrefix)
		if _, isManifest := l.manifests[digest]; isManifest {
			return nil
		}
		if err := r.putBlob(ctx, repos[0], digest, size, rd); err != nil {
			return err
		}
		for _, repo := range repos[1:] {
			if err := r.mountBlob(ctx, repo, repos[0], digest); err != nil {
				return err
			}
		}
		return nil
	})
}

// walkTar calls fn for each regular file of the tarball.
func walkTar(path string, fn func(name string, size int64, r io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar %s: %w", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if err := fn(strings.TrimPrefix(h.Name, "./"), h.Size, tr); err != nil {
			return err
		}
	}
}
