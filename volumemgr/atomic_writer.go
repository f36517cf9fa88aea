package volumemgr

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// The layout of an atomically written volume, as upstream:
//
//	DIR/..2026_05_01_10_00_00.123456789/   the real files (one version)
//	DIR/..data -> ..2026_05_01_10_00_00.123456789
//	DIR/key    -> ..data/key               what containers see
//	DIR/sub    -> ..data/sub               (first path element only)
//
// A new version is written to a fresh timestamped directory, then
// ..data_tmp is pointed at it and renamed over ..data: rename(2) swaps the
// link atomically, so a reader that resolves ..data sees one complete
// version, never a mix. Names starting with ".." belong to the writer.
const (
	dataLink    = "..data"
	newDataLink = "..data_tmp"
	tsLayout    = "..2006_01_02_15_04_05."
	maxNameLen  = 255
	maxPathLen  = 4096
)

// fileProjection is one file of an atomically written volume.
type fileProjection struct {
	Data []byte
	Mode int32
	// FsUser, when set, owns the file (a token readable by the pod's user
	// only).
	FsUser *int64
}

// writeAtomic makes dir hold exactly payload (paths relative to dir), as one
// atomic version. Nothing is written when the current version already has
// the same files with the same content. setPerms, if not nil, runs on dir
// after the new files are written and before they become visible. now names
// the timestamped directory. The caller serializes writes to one dir.
func writeAtomic(dir string, payload map[string]fileProjection, now time.Time, setPerms func() error) error {
	clean := make(map[string]fileProjection, len(payload))
	for p, f := range payload {
		if err := validateProjectionPath(p); err != nil {
			return err
		}
		clean[filepath.Clean(p)] = f
	}
	oldTS, stale, upToDate, err := compareCurrentVersion(dir, clean)
	if err != nil {
		return err
	}
	if upToDate {
		// The visible links may still be missing (a crash between the
		// swap and their creation).
		return linkVisible(dir, clean)
	}
	tsDir, err := swapInVersion(dir, clean, now, setPerms)
	if err != nil {
		return err
	}
	if err := linkVisible(dir, clean); err != nil {
		return err
	}
	return removeOldVersion(dir, oldTS, stale, filepath.Base(tsDir))
}

// compareCurrentVersion reads which version directory ..data names in dir
// ("" when there is none yet) and compares it with payload: stale lists
// its paths that payload no longer has, and upToDate reports that it
// holds exactly payload already.
func compareCurrentVersion(dir string, payload map[string]fileProjection) (oldTS string, stale []string, upToDate bool, err error) {
	oldTS, err = os.Readlink(filepath.Join(dir, dataLink))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", nil, false, fmt.Errorf("read %s link: %w", dataLink, err)
	}
	if oldTS == "" {
		return "", nil, false, nil
	}
	oldPath := filepath.Join(dir, oldTS)
	if stale, err = stalePaths(payload, oldPath); err != nil {
		return "", nil, false, err
	}
	same, err := sameContent(payload, oldPath)
	if err != nil {
		return "", nil, false, err
	}
	return oldTS, stale, same && len(stale) == 0, nil
}

// swapInVersion writes payload into a new timestamped directory of dir,
// runs setPerms, and points ..data at it through the ..data_tmp link and
// one rename. It returns the new directory; on failure what it made is
// removed.
func swapInVersion(dir string, payload map[string]fileProjection, now time.Time, setPerms func() error) (string, error) {
	tsDir, err := os.MkdirTemp(dir, now.UTC().Format(tsLayout))
	if err != nil {
		return "", fmt.Errorf("create data directory: %w", err)
	}
	// Group and others must be able to traverse it whatever the umask.
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return "", err
	}
	if err := writeFiles(tsDir, payload); err != nil {
		_ = os.RemoveAll(tsDir)
		return "", err
	}
	if setPerms != nil {
		if err := setPerms(); err != nil {
			_ = os.RemoveAll(tsDir)
			return "", fmt.Errorf("set volume ownership: %w", err)
		}
	}
	tmpLink := filepath.Join(dir, newDataLink)
	if err := os.Remove(tmpLink); err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = os.RemoveAll(tsDir)
		return "", err
	}
	if err := os.Symlink(filepath.Base(tsDir), tmpLink); err != nil {
		_ = os.RemoveAll(tsDir)
		return "", fmt.Errorf("link new data directory: %w", err)
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataLink)); err != nil {
		_ = os.Remove(tmpLink)
		_ = os.RemoveAll(tsDir)
		return "", fmt.Errorf("swap %s: %w", dataLink, err)
	}
	return tsDir, nil
}

// removeOldVersion removes, once the new version named current is
// visible, the top-level links of the stale paths, the old version
// directory oldTS (if any) and any other leftover version directories. It
// goes on past failures and returns them all.
func removeOldVersion(dir, oldTS string, stale []string, current string) error {
	var errs []error
	for _, p := range stale {
		if strings.Contains(p, "/") {
			continue // removed with the old data directory
		}
		if err := os.Remove(filepath.Join(dir, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if oldTS != "" {
		if err := os.RemoveAll(filepath.Join(dir, oldTS)); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeOrphanVersions(dir, current))
	return errors.Join(errs...)
}

// validateProjectionPath refuses a payload path that could escape dir or
// shadow the writer's own names. The rules and messages are upstream's
// atomic writer's, so a pod sees the same error from nodekit as from kubelet.
func validateProjectionPath(p string) error {
	if problem := projectionPathProblem(p); problem != "" {
		return errors.New("invalid path: " + problem)
	}
	return nil
}

// projectionPathProblem names the first rule p breaks, or "" when it
// breaks none. Whole-path rules come first, then each element in order;
// the ".." prefix of the first element is checked last, once no element
// is ".." itself.
func projectionPathProblem(p string) string {
	switch {
	case p == "":
		return `must not be empty: ""`
	case path.IsAbs(p):
		return "must be relative path: " + p
	case len(p) > maxPathLen:
		return fmt.Sprintf("must be less than or equal to %d characters", maxPathLen)
	}
	for elem := range strings.SplitSeq(p, "/") {
		if elem == ".." {
			return "must not contain '..': " + p
		}
		if len(elem) > maxNameLen {
			return fmt.Sprintf("filenames must be less than or equal to %d characters", maxNameLen)
		}
	}
	// ..data and the version directories live at the top of dir; a top
	// element like "..data" would replace them. A bare ".." was refused
	// above.
	if top, _, _ := strings.Cut(p, "/"); len(top) > len("..") && strings.HasPrefix(top, "..") {
		return "must not start with '..': " + p
	}
	return ""
}

// stalePaths returns the paths of the old version (files and directories,
// relative) that the new payload no longer has.
func stalePaths(payload map[string]fileProjection, oldDir string) ([]string, error) {
	keep := map[string]bool{}
	for p := range payload {
		for q := p; q != "." && q != ""; q = filepath.Dir(q) {
			keep[q] = true
		}
	}
	var out []string
	err := filepath.WalkDir(oldDir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(oldDir, p)
		if err != nil || rel == "." {
			return err
		}
		if !keep[rel] {
			out = append(out, rel)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list current data directory: %w", err)
	}
	return out, nil
}

// sameContent reports whether oldDir already holds every payload file with
// the same bytes.
func sameContent(payload map[string]fileProjection, oldDir string) (bool, error) {
	for p, f := range payload {
		b, err := os.ReadFile(filepath.Join(oldDir, p))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if !bytes.Equal(b, f.Data) {
			return false, nil
		}
	}
	return true, nil
}

func writeFiles(dir string, payload map[string]fileProjection) error {
	for p, f := range payload {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(f.Mode) & os.ModePerm
		if err := os.WriteFile(full, f.Data, mode); err != nil {
			return err
		}
		// WriteFile's mode is filtered by the umask; the volume's is not.
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
		if f.FsUser != nil {
			if err := os.Lchown(full, int(*f.FsUser), -1); err != nil {
				return err
			}
		}
	}
	return nil
}

// linkVisible creates DIR/first -> ..data/first for the first element of
// every payload path that has no link yet.
func linkVisible(dir string, payload map[string]fileProjection) error {
	for p, f := range payload {
		first, _, _ := strings.Cut(p, "/")
		link := filepath.Join(dir, first)
		if _, err := os.Lstat(link); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Symlink(filepath.Join(dataLink, first), link); err != nil {
			return fmt.Errorf("link %s: %w", first, err)
		}
		if f.FsUser != nil {
			if err := os.Lchown(link, int(*f.FsUser), -1); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeOrphanVersions removes timestamped directories left by an
// interrupted write (every one but current).
func removeOrphanVersions(dir, current string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		n := e.Name()
		if n == current || n == dataLink || n == newDataLink || !e.IsDir() || !isVersionDir(n) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isVersionDir reports whether name looks like "..YYYY_MM_DD_hh_mm_ss.X".
func isVersionDir(name string) bool {
	if len(name) <= len(tsLayout) || !strings.HasPrefix(name, "..") {
		return false
	}
	_, err := time.Parse(tsLayout, name[:len(tsLayout)])
	return err == nil
}
