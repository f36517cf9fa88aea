package selinux_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	goselinux "github.com/opencontainers/selinux/go-selinux"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/selinux"
	"github.com/nodekit/nodekit/internal/selinux/selinuxtest"
)

// requireRealHost runs the test only against a real SELinux host
// ($NODEKIT_SELINUX=host: internal/localvm's SELinux guest), where it
// must be enabled.
func requireRealHost(t *testing.T) selinux.Host {
	t.Helper()
	if !selinuxtest.Real() {
		t.Skipf("needs a real SELinux host ($%s=host; internal/localvm's TestSELinux boots one)", selinuxtest.HostEnv)
	}
	if _, ok := selinuxtest.Enabled(t).(selinux.Host); !ok {
		t.Fatal("selinuxtest.Enabled did not return the real host")
	}
	if _, err := os.Stat("/sys/fs/selinux/enforce"); err != nil {
		t.Fatalf("SELinux enabled without /sys/fs/selinux/enforce: %v", err)
	}
	return selinux.Host{}
}

// TestHostFileLabel: on a real SELinux host the file label of
// seLinuxOptions comes from the policy's lxc_contexts file label (Debian's
// and Fedora's: system_u:object_r:container_file_t:s0) with the options'
// user and level: the role and type name the process only, as
// go-selinux's label.InitLabels (upstream's real translator) computes it,
// and as the Fake does. A missing level is a random pair of categories,
// different at each call. Every label is one the loaded policy accepts.
func TestHostFileLabel(t *testing.T) {
	h := requireRealHost(t)
	const base = "system_u:object_r:container_file_t:"
	for _, tc := range []struct {
		opts *v1.SELinuxOptions
		want string
	}{
		{nil, ""},
		{&v1.SELinuxOptions{}, ""},
		{&v1.SELinuxOptions{Level: "s0:c1,c2"}, base + "s0:c1,c2"},
		{&v1.SELinuxOptions{Level: "s0"}, base + "s0"},
		{&v1.SELinuxOptions{User: "system_u", Role: "system_r", Type: "container_t", Level: "s0:c5,c6"}, base + "s0:c5,c6"},
		{&v1.SELinuxOptions{Type: "spc_t", Level: "s0:c1,c2"}, base + "s0:c1,c2"},
		{&v1.SELinuxOptions{Role: "sysadm_r", Level: "s0:c3"}, base + "s0:c3"},
		{&v1.SELinuxOptions{User: "staff_u", Level: "s0:c1,c2"}, "staff_u:object_r:container_file_t:s0:c1,c2"},
	} {
		got, err := h.FileLabel(tc.opts)
		if err != nil || got != tc.want {
			t.Errorf("FileLabel(%+v) = %q, %v; want %q", tc.opts, got, err, tc.want)
			continue
		}
		if fake, _ := (selinux.Fake{}).FileLabel(tc.opts); fake != got {
			t.Errorf("FileLabel(%+v): the Fake gives %q, the host %q", tc.opts, fake, got)
		}
		if got != "" {
			if err := goselinux.SecurityCheckContext(got); err != nil {
				t.Errorf("the policy refuses %q: %v", got, err)
			}
		}
	}
	random := regexp.MustCompile(`^` + base + `s0:c([0-9]+),c([0-9]+)$`)
	seen := map[string]bool{}
	for range 3 {
		got, err := h.FileLabel(&v1.SELinuxOptions{Type: "container_t"})
		if err != nil || !random.MatchString(got) {
			t.Fatalf("FileLabel(type only) = %q, %v; want %s with random categories", got, err, base)
		}
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Errorf("FileLabel without a level gave the same categories three times: %v", seen)
	}
}

// TestHostSupportsLabels: seclabel as the real kernel reports it in
// /proc/self/mountinfo: the root file system (ext4, labels in xattrs) and
// a tmpfs keep labels, /proc does not, nor does a tmpfs mounted with
// context= (one label for the whole mount). A file on that mount reads
// with the mount's context, which mountinfo shows among the super
// options, quoted.
func TestHostSupportsLabels(t *testing.T) {
	h := requireRealHost(t)
	tmp := t.TempDir()
	plain, ctx := filepath.Join(tmp, "plain"), filepath.Join(tmp, "ctx")
	label, err := h.FileLabel(&v1.SELinuxOptions{Level: "s0:c1,c2"})
	if err != nil {
		t.Fatal(err)
	}
	for dir, data := range map[string]string{plain: "", ctx: `context="` + label + `"`} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("seltest", dir, "tmpfs", 0, data); err != nil {
			t.Fatalf("mount tmpfs on %s with %q: %v", dir, data, err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	}
	for path, want := range map[string]bool{"/": true, "/etc/hostname": true, plain: true, plain + "/x": true, "/proc/self": false, ctx: false} {
		if got, err := h.SupportsLabels(path); got != want || err != nil {
			t.Errorf("SupportsLabels(%s) = %v, %v; want %v", path, got, err, want)
		}
	}
	f := filepath.Join(ctx, "file")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := goselinux.FileLabel(f); err != nil || got != label {
		t.Errorf("label of %s = %q, %v; want the mount's %q", f, got, err, label)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(string(mi)) {
		if f := strings.Fields(l); len(f) > 4 && f[4] == ctx {
			line = strings.TrimSpace(l)
		}
	}
	if !strings.Contains(line, `context="`+label+`"`) {
		t.Errorf("mountinfo of %s lacks context=%q: %q", ctx, label, line)
	}
	t.Logf("mountinfo: %s", line)
}
