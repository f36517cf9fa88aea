package volumemgr

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestIsTmpfsMountPoint(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "vol")
	if err := os.Mkdir(sub, 0o750); err != nil {
		t.Fatal(err)
	}
	if isTmpfsMountPoint(sub) {
		t.Fatalf("%s is a plain directory, reported a tmpfs mount point", sub)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("NODEKIT_REQUIRE_INTEGRATION") != "" {
			t.Fatal("NODEKIT_REQUIRE_INTEGRATION is set: mounting a tmpfs needs root")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	if !isTmpfsMountPoint(sub) {
		t.Fatalf("%s is a tmpfs mount point, not reported", sub)
	}
	inner := filepath.Join(sub, "inner")
	if err := os.Mkdir(inner, 0o750); err != nil {
		t.Fatal(err)
	}
	if isTmpfsMountPoint(inner) {
		t.Fatalf("%s is a directory inside a tmpfs, reported a mount point", inner)
	}
}
