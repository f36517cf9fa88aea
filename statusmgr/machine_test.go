package statusmgr

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodekit/nodekit/internal/itest"
)

// writeTree writes files (path relative to root -> content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHostMachineReadsTheTree(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"proc/meminfo": "MemFree:  100 kB\nMemTotal:       16318412 kB\n",
		"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":    "512\n",
		"sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "1\n",
		"etc/machine-id":                 "0123456789abcdef\n",
		"sys/class/dmi/id/product_uuid":  "4c4c4544-0000\n",
		"proc/sys/kernel/random/boot_id": "b00t\n",
		"proc/sys/kernel/osrelease":      "6.12.0-test\n",
		"etc/os-release":                 "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n",
	})
	agentRoot := filepath.Join(t.TempDir(), "not", "created", "yet")
	h := HostMachine{Root: root, RootDir: agentRoot, NumCPU: func() int { return 6 }}
	m, err := h.Machine(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if m.NumCores != 6 || m.MemoryBytes != 16318412*1024 {
		t.Errorf("cores %d memory %d, want 6 and %d", m.NumCores, m.MemoryBytes, 16318412*1024)
	}
	if m.HugePages[2<<20] != 512 || m.HugePages[1<<30] != 1 || len(m.HugePages) != 2 {
		t.Errorf("huge pages = %v", m.HugePages)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(filepath.Dir(filepath.Dir(agentRoot))), &st); err != nil {
		t.Fatal(err)
	}
	if want := st.Blocks * uint64(st.Bsize); m.EphemeralStorageBytes != want {
		t.Errorf("ephemeral storage = %d, want %d (the nearest existing parent's filesystem)", m.EphemeralStorageBytes, want)
	}
	want := Machine{MachineID: "0123456789abcdef", SystemUUID: "4c4c4544-0000", BootID: "b00t",
		KernelVersion: "6.12.0-test", OSImage: "Debian GNU/Linux 13 (trixie)"}
	got := Machine{MachineID: m.MachineID, SystemUUID: m.SystemUUID, BootID: m.BootID, KernelVersion: m.KernelVersion, OSImage: m.OSImage}
	if !jsonEqual(got, want) {
		t.Errorf("identity = %+v, want %+v", got, want)
	}
}

func TestHostMachineOptionalAndRequiredFiles(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"proc/meminfo": "MemTotal: 1024 kB\n"})
	m, err := HostMachine{Root: root, RootDir: root}.Machine(t.Context())
	if err != nil {
		t.Fatalf("only meminfo present: %v, want identity fields empty and no error", err)
	}
	if m.MachineID != "" || m.OSImage != "Linux" || len(m.HugePages) != 0 || m.NumCores <= 0 {
		t.Errorf("machine = %+v", m)
	}

	for name, meminfo := range map[string]string{
		"missing":   "",
		"no total":  "MemFree: 1 kB\n",
		"bad value": "MemTotal: lots kB\n",
	} {
		r := t.TempDir()
		if meminfo != "" {
			writeTree(t, r, map[string]string{"proc/meminfo": meminfo})
		}
		if _, err := (HostMachine{Root: r, RootDir: r}).Machine(t.Context()); err == nil {
			t.Errorf("meminfo %s: no error", name)
		}
	}
}

func TestHostMachineOnThisHost(t *testing.T) {
	m, err := HostMachine{RootDir: t.TempDir()}.Machine(t.Context())
	if err != nil {
		itest.Require(t, "a readable /proc", err)
	}
	if m.NumCores <= 0 || m.MemoryBytes == 0 || m.EphemeralStorageBytes == 0 || m.KernelVersion == "" {
		t.Errorf("host machine = %+v", m)
	}
	t.Logf("this host: %d CPUs, %d bytes memory, huge pages %v, %q", m.NumCores, m.MemoryBytes, m.HugePages, m.OSImage)
}
