package localcri

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// epoch is the modification time of every file the image builder writes, so
// that the same inputs always give the same layer digests.
func epoch() time.Time { return time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC) }

// fileEntry is one entry of a layer tar.
type fileEntry struct {
	name     string // relative to the rootfs, no leading or trailing slash
	typ      byte   // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	mode     int64
	uid, gid int
	linkname string // symlink target
	data     []byte // content of a small regular file
	src      string // or: copy the content of this file
}

func dirEntry(name string, mode int64) fileEntry {
	return fileEntry{name: name, typ: tar.TypeDir, mode: mode}
}

func fileData(name string, mode int64, data []byte) fileEntry {
	return fileEntry{name: name, typ: tar.TypeReg, mode: mode, data: data}
}

func fileFrom(name string, mode int64, src string) fileEntry {
	return fileEntry{name: name, typ: tar.TypeReg, mode: mode, src: src}
}

func symlink(name, target string) fileEntry {
	return fileEntry{name: name, typ: tar.TypeSymlink, mode: 0o777, linkname: target}
}

// blob is a content-addressed file written by the builder.
type blob struct {
	digest string // "sha256:<hex>"
	size   int64
	path   string // where it is on disk
}

// layerBlob is a gzip'd layer plus the digest of its uncompressed tar.
type layerBlob struct {
	blob
	diffID string
}

// writeLayer writes entries as a gzip'd tar into dir and returns its digests.
// Parent directories must be listed explicitly; entries are sorted by name.
func writeLayer(ctx context.Context, dir string, entries []fileEntry) (layerBlob, error) {
	sorted := append([]fileEntry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].name == sorted[i-1].name {
			return layerBlob{}, fmt.Errorf("layer lists %q twice", sorted[i].name)
		}
	}

	f, err := os.CreateTemp(dir, "layer-*")
	if err != nil {
		return layerBlob{}, fmt.Errorf("create layer file: %w", err)
	}
	defer func() {
		if f != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	compressed := sha256.New()
	gz, err := gzip.NewWriterLevel(io.MultiWriter(f, compressed), gzip.BestSpeed)
	if err != nil {
		return layerBlob{}, fmt.Errorf("gzip writer: %w", err)
	}
	uncompressed := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(gz, uncompressed))
	for _, e := range sorted {
		if err := ctx.Err(); err != nil {
			return layerBlob{}, err
		}
		if err := writeEntry(tw, e); err != nil {
			return layerBlob{}, fmt.Errorf("layer entry %q: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return layerBlob{}, fmt.Errorf("finish layer tar: %w", err)
	}
	if err := gz.Close(); err != nil {
		return layerBlob{}, fmt.Errorf("finish layer gzip: %w", err)
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return layerBlob{}, fmt.Errorf("layer size: %w", err)
	}
	if err := f.Close(); err != nil {
		return layerBlob{}, fmt.Errorf("close layer file: %w", err)
	}
	b := blob{digest: digestOf(compressed), size: size, path: f.Name()}
	f = nil
	return layerBlob{blob: b, diffID: digestOf(uncompressed)}, nil
}

func writeEntry(tw *tar.Writer, e fileEntry) error {
	hdr := &tar.Header{
		Typeflag: e.typ,
		Name:     e.name,
		Linkname: e.linkname,
		Mode:     e.mode,
		Uid:      e.uid,
		Gid:      e.gid,
		ModTime:  epoch(),
	}
	if e.typ == tar.TypeDir {
		hdr.Name += "/"
	}
	var src *os.File
	switch {
	case e.typ != tar.TypeReg:
	case e.src != "":
		var err error
		if src, err = os.Open(e.src); err != nil {
			return err
		}
		defer func() { _ = src.Close() }()
		st, err := src.Stat()
		if err != nil {
			return err
		}
		hdr.Size = st.Size()
	default:
		hdr.Size = int64(len(e.data))
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if e.typ != tar.TypeReg {
		return nil
	}
	if src == nil {
		_, err := tw.Write(e.data)
		return err
	}
	n, err := io.Copy(tw, src)
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("%s changed size while copying (%d != %d)", e.src, n, hdr.Size)
	}
	return err
}

// writeBlob stores data as a blob in dir.
func writeBlob(dir string, data []byte) (blob, error) {
	sum := sha256.Sum256(data)
	b := blob{digest: "sha256:" + hex.EncodeToString(sum[:]), size: int64(len(data))}
	f, err := os.CreateTemp(dir, "blob-*")
	if err != nil {
		return blob{}, fmt.Errorf("create blob: %w", err)
	}
	b.path = f.Name()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return blob{}, fmt.Errorf("write blob: %w", err)
	}
	if err := f.Close(); err != nil {
		return blob{}, fmt.Errorf("write blob: %w", err)
	}
	return b, nil
}

func digestOf(h hash.Hash) string {
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// writeLayout writes an OCI image layout (oci-layout, index.json and the
// blobs) as an uncompressed tar to out.
func writeLayout(out io.Writer, index []byte, blobs []blob) error {
	tw := tar.NewWriter(out)
	hdr := func(name string, typ byte, mode, size int64) *tar.Header {
		return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size, ModTime: epoch()}
	}
	small := func(name string, data []byte) error {
		if err := tw.WriteHeader(hdr(name, tar.TypeReg, 0o644, int64(len(data)))); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := small("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := small("index.json", index); err != nil {
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(hdr(d, tar.TypeDir, 0o755, 0)); err != nil {
			return err
		}
	}
	sorted := append([]blob(nil), blobs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].digest < sorted[j].digest })
	seen := map[string]bool{}
	for _, b := range sorted {
		if seen[b.digest] {
			continue
		}
		seen[b.digest] = true
		name := path.Join("blobs/sha256", strings.TrimPrefix(b.digest, "sha256:"))
		if err := tw.WriteHeader(hdr(name, tar.TypeReg, 0o644, b.size)); err != nil {
			return err
		}
		f, err := os.Open(b.path)
		if err != nil {
			return err
		}
		n, err := io.Copy(tw, f)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("copy blob %s: %w", b.digest, err)
		}
		if n != b.size {
			return fmt.Errorf("blob %s: copied %d of %d bytes", b.digest, n, b.size)
		}
	}
	return tw.Close()
}
