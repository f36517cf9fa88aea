package volumemgr

import (
	"context"
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

// tableCountingMounter mounts nothing; it records mounts in a table and
// counts how often the table is read.
type tableCountingMounter struct {
	table []MountPoint
	reads int
}

func (m *tableCountingMounter) Mount(_ context.Context, _, target, fstype string, _ []string) error {
	m.table = append(m.table, MountPoint{Path: filepath.Clean(target), Type: fstype})
	return nil
}

func (m *tableCountingMounter) Unmount(context.Context, string) error { return nil }

func (m *tableCountingMounter) MountPoints(context.Context) ([]MountPoint, error) {
	m.reads++
	return append([]MountPoint(nil), m.table...), nil
}

// A first set-up mounts its fresh directory without reading the mount
// table; a second one on the existing directory reads it (this mounter
// mounts nothing on the host, so the two stats cannot tell) and does not
// mount again.
func TestEnsureTmpfsFreshDirectory(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "pods", "uid", "volumes", "kubernetes.io~projected", "token")
	m := &tableCountingMounter{}
	if err := ensureTmpfs(ctx, m, dir, 0); err != nil {
		t.Fatal(err)
	}
	if m.reads != 0 || len(m.table) != 1 {
		t.Fatalf("first set-up: %d mount table reads, mounts %v; want 0 reads and one mount", m.reads, m.table)
	}
	if err := ensureTmpfs(ctx, m, dir, 0); err != nil {
		t.Fatal(err)
	}
	if m.reads != 1 || len(m.table) != 1 {
		t.Fatalf("second set-up: %d mount table reads, mounts %v; want 1 read and no new mount", m.reads, m.table)
	}
}
