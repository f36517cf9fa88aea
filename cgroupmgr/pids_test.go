package cgroupmgr

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMaxPIDs(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "kernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, "kernel", name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pid_max", "32768\n")
	write("threads-max", "192724\n")
	if n, err := MaxPIDs(dir); err != nil || n != 32768 {
		t.Errorf("MaxPIDs = %d, %v; want pid_max 32768", n, err)
	}
	write("pid_max", "4194304\n")
	if n, err := MaxPIDs(dir); err != nil || n != 192724 {
		t.Errorf("MaxPIDs = %d, %v; want threads-max 192724", n, err)
	}
	write("threads-max", "x\n")
	if _, err := MaxPIDs(dir); err == nil {
		t.Error("an unreadable threads-max gave no error")
	}
	if _, err := MaxPIDs(t.TempDir()); err == nil {
		t.Error("a procfs without the files gave no error")
	}
}
