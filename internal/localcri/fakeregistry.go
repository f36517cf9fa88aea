package localcri

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// FakeRegistryImage is what upstream's private-registry specs pull from
// agnhost's fake-registry-server (test/e2e/framework/registry): the local
// agnhost image carries it, generated from the local pause image, under
// /var/registry.
const FakeRegistryImage = "localhost:5000/pause:testing"

// fakeRegistryRoot is where agnhost's fake-registry-server reads its files.
const fakeRegistryRoot = "var/registry"

// fakeRegistryFormat goes into the agnhost cache key with the pause
// image's: bump it when the layout written here changes.
const fakeRegistryFormat = "nodekit-localcri-fakeregistry/v1"

// fakeRegistryInput is the agnhost cache-key input for the pause image the
// layer is made from: that image's own cache key.
func fakeRegistryInput(specs []imageSpec, baseInputs []string) string {
	for _, s := range specs {
		if s.name == ImagePause {
			return fakeRegistryFormat + ":" + cacheKey(s, baseInputs)
		}
	}
	return fakeRegistryFormat + ":no-pause"
}

// fakeRegistryLayer returns the /var/registry entries for pause:testing,
// read from the cached pause image (built before agnhost): the tag file
// holding the manifest digest, and the manifest and its blobs at
// <dir>/sha256/<2 hex>/<hex>/data, as prepare_registry.sh lays them out.
// Everything is world-readable: upstream's registry pod runs as uid 5123.
func fakeRegistryLayer(cacheDir string, specs []imageSpec, baseInputs []string) ([]fileEntry, error) {
	var pause *imageSpec
	for i := range specs {
		if specs[i].name == ImagePause {
			pause = &specs[i]
		}
	}
	if pause == nil {
		return nil, errors.New("fake registry: no pause image to serve")
	}
	it, ok := readCached(cacheDir, ImagePause, cacheKey(*pause, baseInputs))
	if !ok {
		return nil, errors.New("fake registry: the pause image is not built yet")
	}
	blobs, err := readLayoutBlobs(it.Path)
	if err != nil {
		return nil, fmt.Errorf("fake registry: %w", err)
	}
	return fakeRegistryEntries("pause", "testing", it.Manifest, blobs)
}

// fakeRegistryEntries lays out one image (manifest digest and every blob
// of its layout by digest) for fake-registry-server as repo:tag.
func fakeRegistryEntries(repo, tag, manifestDigest string, blobs map[string][]byte) ([]fileEntry, error) {
	man, ok := blobs[manifestDigest]
	if !ok {
		return nil, fmt.Errorf("fake registry: manifest %s not in the layout", manifestDigest)
	}
	var m manifest
	if err := json.Unmarshal(man, &m); err != nil {
		return nil, fmt.Errorf("fake registry: manifest %s: %w", manifestDigest, err)
	}
	top := path.Join(fakeRegistryRoot, repo)
	dirs := map[string]bool{}
	var out []fileEntry
	add := func(dir, digest string, data []byte) {
		hex := strings.TrimPrefix(digest, "sha256:")
		p := path.Join(dir, "sha256", hex[:2], hex)
		for d := p; d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			out = append(out, dirEntry(d, 0o755))
		}
		out = append(out, fileData(path.Join(p, "data"), 0o644, data))
	}
	add(path.Join(top, "manifests"), manifestDigest, man)
	for _, d := range append([]descriptor{m.Config}, m.Layers...) {
		data, ok := blobs[d.Digest]
		if !ok {
			return nil, fmt.Errorf("fake registry: blob %s of %s not in the layout", d.Digest, manifestDigest)
		}
		add(path.Join(top, "blobs"), d.Digest, data)
	}
	out = append(out, fileData(path.Join(top, "manifests", tag), 0o644, []byte(manifestDigest+"\n")))
	return out, nil
}

// readLayoutBlobs reads every blob of an OCI image layout tarball into
// memory, by digest (the pause image is a few MB).
func readLayoutBlobs(layoutTar string) (map[string][]byte, error) {
	f, err := os.Open(layoutTar)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", layoutTar, err)
		}
		hex, ok := strings.CutPrefix(hdr.Name, "blobs/sha256/")
		if !ok || hex == "" || hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read %s: %s: %w", layoutTar, hdr.Name, err)
		}
		out["sha256:"+hex] = data
	}
}
