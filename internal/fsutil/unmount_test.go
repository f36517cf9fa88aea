package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodekit/nodekit/internal/itest"
)

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a/b`: "/a/b", `/a\040b`: "/a b", `/x\011y\134`: "/x\ty\\", `/p\0`: `/p\0`} {
		if got := UnescapeMountPath(in); got != want {
			t.Errorf("UnescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnmountBelow: a bind mount of dir on itself and a tmpfs inside it
// (as an agent's root and a pod volume) are both detached, the deeper
// first; a mount beside dir with a common prefix is left alone. Root only.
func TestUnmountBelow(t *testing.T) {
	if os.Geteuid() != 0 {
		itest.Require(t, "root (to mount)", errors.New("not root"))
	}
	base := t.TempDir()
	dir := filepath.Join(base, "root")
	vol := filepath.Join(dir, "pods", "vol")
	beside := filepath.Join(base, "root2")
	for _, d := range []string{vol, beside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		itest.Require(t, "bind mounts (CAP_SYS_ADMIN)", err)
	}
	for _, m := range []string{vol, beside} {
		if err := unix.Mount("tmpfs", m, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = unix.Unmount(beside, unix.MNT_DETACH) })
	done, err := UnmountBelow(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(done, []string{vol, dir}) {
		t.Errorf("unmounted %v, want %v then %v", done, vol, dir)
	}
	if again, err := UnmountBelow(dir); err != nil || len(again) != 0 {
		t.Errorf("second call: %v, %v; want nothing left", again, err)
	}
	var st, parent unix.Stat_t
	if err := unix.Stat(beside, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(base, &parent); err != nil {
		t.Fatal(err)
	}
	if st.Dev == parent.Dev {
		t.Error("the mount beside dir was unmounted too")
	}
}

// TestUnmountUnder: the tmpfs inside dir is detached, the bind mount of
// dir itself stays. Root only.
func TestUnmountUnder(t *testing.T) {
	if os.Geteuid() != 0 {
		itest.Require(t, "root (to mount)", errors.New("not root"))
	}
	dir := filepath.Join(t.TempDir(), "root")
	vol := filepath.Join(dir, "pods", "vol")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		itest.Require(t, "bind mounts (CAP_SYS_ADMIN)", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("tmpfs", vol, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	done, err := UnmountUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(done, []string{vol}) {
		t.Errorf("unmounted %v, want only %v", done, vol)
	}
	paths, err := MountPaths()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(paths, dir) {
		t.Errorf("the mount at %s itself was detached", dir)
	}
	if slices.Contains(paths, vol) {
		t.Errorf("%s is still mounted", vol)
	}
}
