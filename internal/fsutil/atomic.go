package fsutil

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Option changes how WriteFileAtomic and WriteAtomic write.
type Option func(*options)

type options struct {
	noSync bool
	// rename replaces os.Rename in this package's tests.
	rename func(oldpath, newpath string) error
}

// NoSync, when skip is true, skips the fsync of the file and of its
// directory. The replacement stays atomic for other readers but is not
// durable across a power loss; it is meant for tests that write thousands
// of checkpoints, and for files whose content is checked again before use
// after a crash (a pod's hosts file).
func NoSync(skip bool) Option {
	return func(o *options) { o.noSync = skip }
}

// WriteFileAtomic replaces the file at path with data and mode perm. It
// writes a temporary file in the same directory, syncs it, renames it over
// path and syncs the directory, so after a crash path holds either the old
// content or data. On any error the temporary file is removed and the old
// file is left as it was. The directory must exist. It blocks on disk I/O.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode, opts ...Option) error {
	return WriteAtomic(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, opts...)
}

// WriteAtomic is WriteFileAtomic for content that write produces; an error
// from write aborts the replacement and is returned wrapped.
func WriteAtomic(path string, perm fs.FileMode, write func(io.Writer) error, opts ...Option) (err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	rename := os.Rename
	if o.rename != nil {
		rename = o.rename
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close() // may already be closed
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := write(tmp); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if !o.noSync {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("write %s: fsync: %w", path, err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if o.noSync {
		return nil
	}
	// The rename is done: from here the temporary name is gone, so a
	// failure only means the new name may not yet be durable.
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("write %s: fsync directory: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
