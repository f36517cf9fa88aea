package pullrecords

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/internal/fsutil"
)

const (
	filePrefix = "sha256-"
	// tmpSuffix ends the temporary files earlier versions wrote; today's
	// (fsutil's) start with a dot and never carry filePrefix.
	tmpSuffix = ".tmp"
	// apiVersion is the version records are written in; older ones
	// (v1alpha1, the same fields) are read and rewritten.
	apiVersion    = "kubelet.config.k8s.io/v1beta1"
	apiVersionOld = "kubelet.config.k8s.io/v1alpha1"
	kindIntent    = "ImagePullIntent"
	kindRecord    = "ImagePulledRecord"
)

// files is the on-disk layout kubelet uses under its root directory.
type files struct {
	pulling, pulled string // ROOT/image_manager/{pulling,pulled}
}

func newFiles(rootDir string) (*files, error) {
	f := &files{
		pulling: filepath.Join(rootDir, "image_manager", "pulling"),
		pulled:  filepath.Join(rootDir, "image_manager", "pulled"),
	}
	for _, d := range []string{f.pulling, f.pulled} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("pull records: %w", err)
		}
	}
	return f, nil
}

// fileName is the name of the file for key (an image or an image ID).
func fileName(key string) string {
	return fmt.Sprintf("%s%x", filePrefix, sha256.Sum256([]byte(key)))
}

func (f *files) writeIntent(image string) error {
	in := kubeletv1beta1.ImagePullIntent{Image: image}
	in.APIVersion, in.Kind = apiVersion, kindIntent
	return writeJSON(f.pulling, fileName(image), &in)
}

func (f *files) deleteIntent(image string) error {
	return removeFile(filepath.Join(f.pulling, fileName(image)))
}

// intentExists says whether a valid intent for image is on disk.
func (f *files) intentExists(image string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(f.pulling, fileName(image)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	in, _, err := decodeIntent(b)
	if err != nil {
		return false, err
	}
	return in.Image == image, nil
}

// record reads the record of imageRef; nil and no error when there is
// none. A file that does not decode is an error.
func (f *files) record(imageRef string) (*kubeletv1beta1.ImagePulledRecord, error) {
	b, err := os.ReadFile(filepath.Join(f.pulled, fileName(imageRef)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	rec, _, err := decodeRecord(b)
	if err != nil {
		return nil, fmt.Errorf("pull record of %s: %w", imageRef, err)
	}
	if rec.ImageRef != imageRef {
		return nil, nil // a hash collision, or a file of another image
	}
	return rec, nil
}

func (f *files) writeRecord(rec *kubeletv1beta1.ImagePulledRecord) error {
	rec.APIVersion, rec.Kind = apiVersion, kindRecord
	return writeJSON(f.pulled, fileName(rec.ImageRef), rec)
}

func (f *files) deleteRecord(imageRef string) error {
	return removeFile(filepath.Join(f.pulled, fileName(imageRef)))
}

// records lists the records that decode, with the errors of those that
// do not, joined.
func (f *files) records() ([]*kubeletv1beta1.ImagePulledRecord, error) {
	var out []*kubeletv1beta1.ImagePulledRecord
	err := each(f.pulled, func(path string, b []byte) error {
		rec, _, err := decodeRecord(b)
		if err != nil {
			return fmt.Errorf("decode ImagePulledRecord %s: %w", path, err)
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

// intents lists the images of the intents that decode, with the errors
// of those that do not, joined.
func (f *files) intents() ([]string, error) {
	var out []string
	err := each(f.pulling, func(path string, b []byte) error {
		in, _, err := decodeIntent(b)
		if err != nil {
			return fmt.Errorf("decode ImagePullIntent %s: %w", path, err)
		}
		out = append(out, in.Image)
		return nil
	})
	return out, err
}

// count is how many record files dir holds (as kubelet counts them: not
// directories, not temporary files), without reading them.
func count(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if isRecordFile(e) {
			n++
		}
	}
	return n, nil
}

func isRecordFile(e fs.DirEntry) bool {
	name := e.Name()
	return !e.IsDir() && strings.HasPrefix(name, filePrefix) && !strings.HasSuffix(name, tmpSuffix)
}

// each calls fn with the path and content of every record file in dir
// (not temporary files, not files of other programs) and returns the
// errors of the files it could not read or fn refused, joined.
func each(dir string, fn func(path string, b []byte) error) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !isRecordFile(e) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err == nil {
			err = fn(path, b)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// decodeIntent decodes an intent file strictly (unknown fields refused);
// current says it is in the version written today.
func decodeIntent(b []byte) (*kubeletv1beta1.ImagePullIntent, bool, error) {
	var in kubeletv1beta1.ImagePullIntent
	current, err := decodeStrict(b, kindIntent, &in)
	return &in, current, err
}

func decodeRecord(b []byte) (*kubeletv1beta1.ImagePulledRecord, bool, error) {
	var rec kubeletv1beta1.ImagePulledRecord
	current, err := decodeStrict(b, kindRecord, &rec)
	return &rec, current, err
}

func decodeStrict(b []byte, kind string, into any) (bool, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(b, &tm); err != nil {
		return false, err
	}
	if tm.Kind != kind || (tm.APIVersion != apiVersion && tm.APIVersion != apiVersionOld) {
		return false, fmt.Errorf("not a %s: apiVersion %q, kind %q", kind, tm.APIVersion, tm.Kind)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(into); err != nil {
		return false, err
	}
	return tm.APIVersion == apiVersion, nil
}

// writeJSON writes v to dir/name through a temporary file and a rename
// (fsutil.WriteFileAtomic), so that a crash leaves the old file or the
// new one. It does not fsync, as before: a record lost to a power cut is
// written again at the next pull.
func writeJSON(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, name), b, 0o600, fsutil.NoSync(true))
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
