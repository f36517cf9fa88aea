package userns

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"os/user"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// KubeletUser is the user whose subordinate IDs are the node's range, as
// upstream's.
const KubeletUser = "kubelet"

// Host is what NodeRange asks of the machine; OSHost is the real one and
// tests pass a fake.
type Host interface {
	// UserExists reports whether the user is known (false, nil when it
	// is not; an error when the user database cannot be read).
	UserExists(ctx context.Context, name string) (bool, error)
	// LookPath finds an executable on the PATH, as exec.LookPath.
	LookPath(file string) (string, error)
	// Output runs the executable and returns its standard output; a
	// non-zero exit is an error.
	Output(ctx context.Context, path string, args ...string) ([]byte, error)
}

// OSHost is the machine itself: getent (or os/user), exec.LookPath and
// os/exec.
type OSHost struct{}

var _ Host = OSHost{}

// getentNotFound is getent's exit status for a key the database lacks.
const getentNotFound = 2

// UserExists looks the user up in the passwd database through the name
// service switch, as kubelet's os/user lookup does in its cgo build:
// `getent passwd NAME`. fullagent's release build has no cgo, and
// os/user without cgo reads /etc/passwd alone, missing users that come
// from LDAP, SSSD or systemd's userdb; os/user is the fallback only when
// getent is not on the PATH.
func (OSHost) UserExists(ctx context.Context, name string) (bool, error) {
	getent, err := exec.LookPath("getent")
	if err != nil {
		_, err := user.Lookup(name)
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return false, nil
		}
		return err == nil, err
	}
	err = exec.CommandContext(ctx, getent, "passwd", name).Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == getentNotFound:
		return false, nil
	default:
		return false, fmt.Errorf("look up user %q: getent passwd: %w", name, err)
	}
}

// LookPath is exec.LookPath.
func (OSHost) LookPath(file string) (string, error) { return exec.LookPath(file) }

// Output runs path with args and returns its standard output.
func (OSHost) Output(ctx context.Context, path string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, path, args...).Output()
}

// NodeRange returns the node's host ID range (first ID and length) as
// upstream kubelet v1.37 chooses it: when a user named kubelet exists, the
// subordinate UIDs that `getsubids kubelet` reports, which must equal the
// GIDs `getsubids -g kubelet` reports; otherwise upstream's default, every
// ID from idsPerPod (0 means DefaultIDsPerPod) up to 2^32-1. As upstream,
// a kubelet user without a getsubids on the PATH is an error, not the
// default (kubelet v1.37.2 tests the lookup error with os.IsNotExist, which
// exec.LookPath's error never satisfies, so kubelet fails to start there),
// and so is output other than one line "N: kubelet FIRST LENGTH". The
// range is checked by Config.Validate, not here. It blocks on the two
// getsubids runs.
func NodeRange(ctx context.Context, h Host, idsPerPod uint32) (first, length uint32, err error) {
	if idsPerPod == 0 {
		idsPerPod = DefaultIDsPerPod
	}
	first, length = idsPerPod, uint32((1<<32)-uint64(idsPerPod))
	logger := klog.FromContext(ctx)
	ok, err := h.UserExists(ctx, KubeletUser)
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		logger.V(5).Info("user namespaces: user not found, using default mappings", "user", KubeletUser)
		return first, length, nil
	}
	cmd, err := h.LookPath("getsubids")
	if err != nil {
		return 0, 0, err
	}
	uids, err := h.Output(ctx, cmd, KubeletUser)
	if err != nil {
		return 0, 0, fmt.Errorf("error retrieving additional uids for user %q: %w", KubeletUser, err)
	}
	gids, err := h.Output(ctx, cmd, "-g", KubeletUser)
	if err != nil {
		return 0, 0, fmt.Errorf("error retrieving additional gids for user %q: %w", KubeletUser, err)
	}
	if string(uids) != string(gids) {
		return 0, 0, fmt.Errorf("mismatched subuids and subgids for user %q", KubeletUser)
	}
	logger.V(5).Info("user namespaces: user found, using mappings from getsubids", "user", KubeletUser)
	return parseSubIDs(string(uids))
}

// parseSubIDs reads getsubids' one line, "0: kubelet 65536 2147483648":
// the index, the user, the first ID and the count.
func parseSubIDs(out string) (first, length uint32, err error) {
	line := strings.Trim(out, "\n")
	if strings.Contains(line, "\n") {
		return 0, 0, fmt.Errorf("error parsing line %q: it must contain only one line", out)
	}
	fields := strings.Fields(line)
	if len(fields) != 4 {
		return 0, 0, fmt.Errorf("invalid line %q", out)
	}
	var ids [2]uint64
	for i, s := range fields[2:] {
		if ids[i], err = strconv.ParseUint(s, 10, 32); err != nil {
			return 0, 0, fmt.Errorf("error parsing line %q: %w", out, err)
		}
	}
	return uint32(ids[0]), uint32(ids[1]), nil
}
