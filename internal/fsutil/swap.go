package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// SwapName is the name of the companion file WriteFileSwap keeps beside
// path: a dot, path's base name and ".swap".
func SwapName(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+".swap")
}

// WriteFileSwap replaces the content at path with data and mode perm, as
// WriteFileAtomic does (after a crash path holds the old content or data,
// and the new name is durable once it returns), for a file that one
// writer rewrites many times: a checkpoint written on every pod start.
//
// Instead of a new temporary file per write it writes a fixed companion
// (SwapName(path)), syncs it, and exchanges the two names in one step
// (renameat2 with RENAME_EXCHANGE). The companion then holds the previous
// content, and the next write truncates and reuses it, so a write neither
// creates nor frees an inode. That matters on ext4 without a journal,
// where creating a file or directory steps past each inode freed in the
// last few minutes in its block group one at a time: a file replaced by
// rename once per pod made every later mkdir in its group slower as a
// burst of pods went on.
//
// Where path does not exist yet, is not a regular file, or the file
// system cannot exchange names, the companion is renamed over path
// instead (the old file, if any, is freed, as WriteFileAtomic would). The
// caller must be the only writer of path: two writers would share the
// companion. A reader that keeps path open across two writes may read the
// second write's bytes (its file became the companion); a reader that
// opens path per read sees one whole write, as with WriteFileAtomic. On
// an error path keeps its old content; the companion may hold part of
// data and is truncated by the next write. The directory must exist.
func WriteFileSwap(path string, data []byte, perm fs.FileMode, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	exchange := true
	switch fi, err := os.Lstat(path); {
	case errors.Is(err, fs.ErrNotExist):
		exchange = false
	case err != nil:
		return fmt.Errorf("write %s: %w", path, err)
	case fi.IsDir():
		return fmt.Errorf("write %s: is a directory", path)
	case !fi.Mode().IsRegular():
		exchange = false // replace a link or device, as a rename would
	}
	swap := SwapName(path)
	if err := writeCompanion(swap, data, perm, !o.noSync); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := swapInto(swap, path, exchange); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if o.noSync {
		return nil
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("write %s: fsync directory: %w", path, err)
	}
	return nil
}

// swapInto puts the companion swap at path: by exchanging the two names
// when exchange is set, by a rename when it is not or when the exchange
// cannot be made (path gone since the caller looked: ENOENT; a file
// system without exchange: EINVAL, ENOSYS, EOPNOTSUPP).
func swapInto(swap, path string, exchange bool) error {
	if exchange {
		err := unix.Renameat2(unix.AT_FDCWD, swap, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) &&
			!errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP):
			return fmt.Errorf("exchange with %s: %w", filepath.Base(swap), err)
		}
	}
	return os.Rename(swap, path)
}

// writeCompanion writes data into the file at name, reusing the file if it
// exists; it refuses a symbolic link there.
func writeCompanion(name string, data []byte, perm fs.FileMode, sync bool) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil && sync {
		if serr := f.Sync(); serr != nil {
			err = fmt.Errorf("fsync: %w", serr)
		}
	}
	return errors.Join(err, f.Close())
}
