package cgroupmgr

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeV1Root lays out a v1 cgroup tree in a temp dir as a machine mounts
// it: cpu and cpuacct co-mounted with links, cpuset with CPUs and memory
// nodes at the top, the usual others.
func fakeV1Root(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"cpu,cpuacct", "cpuset", "memory", "pids", "hugetlb", "blkio", "devices", "systemd"} {
		mkdirAll(t, filepath.Join(root, d))
	}
	for _, l := range []string{"cpu", "cpuacct"} {
		if err := os.Symlink("cpu,cpuacct", filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	writeT(t, filepath.Join(root, "cpuset", "cpuset.cpus"), "0-3\n")
	writeT(t, filepath.Join(root, "cpuset", "cpuset.mems"), "0\n")
	return root
}

// fakeV2Root is a v2 root offering the usual controllers.
func fakeV2Root(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeT(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu io memory hugetlb pids rdma misc\n")
	writeT(t, filepath.Join(root, "cgroup.subtree_control"), "")
	return root
}

func mkdirAll(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeT(t *testing.T, p, s string) {
	t.Helper()
	mkdirAll(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readT reads a file, trimmed; "<missing>" when absent.
func readT(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// killRecorder is a KillProcess that records pids.
type killRecorder struct {
	mu   sync.Mutex
	pids []int
	err  error
}

func (k *killRecorder) kill(pid int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return k.err
	}
	k.pids = append(k.pids, pid)
	return nil
}
