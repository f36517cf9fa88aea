package selinux

import (
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestHostWithoutSELinux: on a host without /sys/fs/selinux (this one)
// Host reports SELinux disabled and no file system keeping labels, as
// upstream's hostutil.GetSELinuxSupport does, without reading the mount
// table.
func TestHostWithoutSELinux(t *testing.T) {
	if _, err := os.Stat("/sys/fs/selinux"); err == nil {
		t.Skip("this host has SELinux")
	}
	h := Host{}
	if h.Enabled() {
		t.Fatal("Enabled on a host without /sys/fs/selinux")
	}
	if ok, err := h.SupportsLabels("/"); ok || err != nil {
		t.Errorf("SupportsLabels(/) = %v, %v; want false, nil", ok, err)
	}
	if l, err := h.FileLabel(nil); l != "" || err != nil {
		t.Errorf("FileLabel(nil) = %q, %v", l, err)
	}
}

// TestSeclabel: the mount of a path is the longest mount point above it
// (the last one of that path when mounts are stacked), and seclabel may be
// in its mount or its super options.
func TestSeclabel(t *testing.T) {
	table := []byte(`22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,seclabel
30 22 0:5 / /var/lib/kubelet rw shared:2 - tmpfs tmpfs rw
31 30 0:6 / /var/lib/kubelet/pods/u/volumes/v rw,seclabel shared:3 - xfs /dev/sdb rw
32 22 0:7 / /data rw shared:4 - nfs srv:/x rw
33 32 0:8 / /data rw shared:5 - xfs /dev/sdc rw,seclabel
34 22 0:9 / /with\040space rw shared:6 - tmpfs tmpfs rw
`)
	for path, want := range map[string]bool{
		"/etc":                            true,
		"/var/lib/kubelet/pods/u/volumes": false,
		"/var/lib/kubelet/pods/u/volumes/v/mount": true,
		"/var/lib/kubeletx":                       true,
		"/data/f":                                 true,
		"/with space/f":                           false,
	} {
		if got, err := hasSeclabel(table, path); got != want || err != nil {
			t.Errorf("%s: %v, %v; want %v", path, got, err, want)
		}
	}
}

// TestFakeLabel: the real host's translation (TestHostFileLabel checks
// the two agree on a real SELinux host): user and level from the
// options, the file role and type whatever the options' role and type,
// no label for empty options.
func TestFakeLabel(t *testing.T) {
	for _, tc := range []struct {
		opts *v1.SELinuxOptions
		want string
	}{
		{nil, ""},
		{&v1.SELinuxOptions{}, ""},
		{&v1.SELinuxOptions{Level: "s0:c1,c2"}, "system_u:object_r:container_file_t:s0:c1,c2"},
		{&v1.SELinuxOptions{Type: "container_t"}, "system_u:object_r:container_file_t:s0:c998,c999"},
		{&v1.SELinuxOptions{Type: "spc_t", Level: "s0:c1,c2"}, "system_u:object_r:container_file_t:s0:c1,c2"},
		{&v1.SELinuxOptions{User: "u", Role: "r", Type: "t", Level: "s0"}, "u:object_r:container_file_t:s0"},
	} {
		if got, err := (Fake{}).FileLabel(tc.opts); got != tc.want || err != nil {
			t.Errorf("FileLabel(%+v) = %q, %v; want %q", tc.opts, got, err, tc.want)
		}
	}
}
