package selinux

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	goselinux "github.com/opencontainers/selinux/go-selinux"
	"github.com/opencontainers/selinux/go-selinux/label"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// Host is the real host: Enabled asks the kernel (/sys/fs/selinux), as
// upstream kubelet does; on a host without SELinux it is false and the
// other methods are never needed.
type Host struct{}

// Enabled reports whether SELinux is enabled on the host.
func (Host) Enabled() bool { return goselinux.GetEnabled() }

// FileLabel returns the file label (SELinux context) that files of a
// process with opts get, "" when opts is nil or empty. It reserves
// nothing: the process label it computes on the way is released.
func (Host) FileLabel(opts *v1.SELinuxOptions) (string, error) {
	args := contextOptions(opts)
	if len(args) == 0 {
		return "", nil
	}
	process, file, err := label.InitLabels(args)
	if err != nil {
		return "", &TranslationError{Msg: err.Error()}
	}
	goselinux.ReleaseLabel(process)
	return file, nil
}

// SupportsLabels reports whether the file system path is on keeps SELinux
// labels: its mount (the nearest mount point at or above path in
// /proc/self/mountinfo) has seclabel in its mount or super options.
// Always false, with no I/O, when SELinux is disabled.
func (h Host) SupportsLabels(path string) (bool, error) {
	if !h.Enabled() {
		return false, nil
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	return hasSeclabel(b, path)
}

// hasSeclabel finds the mount of path in mountinfo b and looks for
// seclabel in its options.
func hasSeclabel(b []byte, path string) (bool, error) {
	path = filepath.Clean(path)
	best, found := "", false
	var opts []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 3 {
			continue
		}
		mp := fsutil.UnescapeMountPath(f[4])
		if !within(path, mp) || (found && len(mp) < len(best)) {
			continue
		}
		best, found = mp, true
		opts = append(strings.Split(f[5], ","), strings.Split(g[2], ",")...)
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	if !found {
		return false, fmt.Errorf("no mount found for %s", path)
	}
	return slices.Contains(opts, "seclabel"), nil
}

// within reports whether path is mount point mp or below it.
func within(path, mp string) bool {
	return mp == "/" || path == mp || strings.HasPrefix(path, mp+"/")
}

// contextOptions are opts as label.InitLabels takes them.
func contextOptions(opts *v1.SELinuxOptions) []string {
	if opts == nil {
		return nil
	}
	var args []string
	for _, kv := range [][2]string{{"user", opts.User}, {"role", opts.Role}, {"type", opts.Type}, {"level", opts.Level}} {
		if kv[1] != "" {
			args = append(args, kv[0]+":"+kv[1])
		}
	}
	return args
}

// TranslationError is a FileLabel failure: seLinuxOptions the host's
// policy cannot turn into a label.
type TranslationError struct{ Msg string }

func (e *TranslationError) Error() string { return e.Msg }

// IsTranslationError reports whether err is a TranslationError.
func IsTranslationError(err error) bool {
	var t *TranslationError
	return errors.As(err, &t)
}

// Fake is an SELinux-enabled host for tests. Its label translation is
// the real host's (go-selinux's label.InitLabels over the policy's
// lxc_contexts, whose file label is system_u:object_r:container_file_t:s0
// on Debian and Fedora), as measured in internal/localvm's SELinux guest:
// the options' user (else system_u) and level, with role object_r and
// type container_file_t whatever the options' role and type (they are the
// process's); empty options give no label. A missing level, random
// categories on the real host, is s0:c998,c999 here. Upstream's fake
// translator, which this one followed before, keeps the role and the
// type and labels empty options; a real host does neither. Seclabel lists
// the paths (and the trees below them) that keep labels; nil means every
// path does.
type Fake struct {
	Disabled bool
	Seclabel []string
}

// Enabled is !f.Disabled.
func (f Fake) Enabled() bool { return !f.Disabled }

// FileLabel translates opts as the real host does (see Fake).
func (Fake) FileLabel(opts *v1.SELinuxOptions) (string, error) {
	if len(contextOptions(opts)) == 0 {
		return "", nil
	}
	user, level := opts.User, opts.Level
	if user == "" {
		user = "system_u"
	}
	if level == "" {
		level = "s0:c998,c999"
	}
	return user + ":object_r:container_file_t:" + level, nil
}

// SupportsLabels reports whether path is in f.Seclabel (or f.Seclabel is
// nil), false when disabled.
func (f Fake) SupportsLabels(path string) (bool, error) {
	if f.Disabled {
		return false, nil
	}
	if f.Seclabel == nil {
		return true, nil
	}
	for _, p := range f.Seclabel {
		if within(filepath.Clean(path), filepath.Clean(p)) {
			return true, nil
		}
	}
	return false, nil
}
