package localcri

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveVersion(t *testing.T) {
	for _, tc := range []struct {
		name, arg, env, want string
		wantErr              bool
	}{
		{name: "default", want: Containerd16},
		{name: "from the environment", env: "2", want: Containerd2},
		{name: "Config.Version wins", arg: "1.6", env: "2", want: Containerd16},
		{name: "bad Config.Version", arg: "1.7", wantErr: true},
		{name: "bad environment", env: "v2", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(VersionEnv, tc.env)
			got, err := ResolveVersion(tc.arg)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ResolveVersion(%q) with $%s=%q = %q, %v; want %q, error %v", tc.arg, VersionEnv, tc.env, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestContainerd2Binaries: containerd 2, its shim and runc come from
// BinDir/containerd2; ctr and the network tools from the machine.
func TestContainerd2Binaries(t *testing.T) {
	bin := t.TempDir()
	if _, err := lookupBinaries(Containerd2, bin); err == nil || !strings.Contains(err.Error(), filepath.Join(bin, containerd2Dir, "containerd")) {
		t.Fatalf("lookupBinaries with nothing built: err = %v, want one naming %s", err, filepath.Join(bin, containerd2Dir, "containerd"))
	}
	dir := filepath.Join(bin, containerd2Dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"containerd", "containerd-shim-runc-v2", "runc"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := lookupBinaries(Containerd2, bin)
	if err != nil && strings.Contains(err.Error(), dir) {
		// Missing host tools (ctr, ip, ...) are another matter.
		t.Fatalf("lookupBinaries with containerd 2 built: %v", err)
	}
	for name, got := range map[string]string{"containerd": b.containerd, "containerd-shim-runc-v2": b.shim, "runc": b.runc} {
		if got != filepath.Join(dir, name) {
			t.Errorf("%s = %s, want %s", name, got, filepath.Join(dir, name))
		}
	}
	if env := strings.Join(childEnv(b), "\n"); !strings.Contains(env, "PATH="+dir+":") {
		t.Errorf("containerd 2's PATH does not start with %s:\n%s", dir, env)
	}
}

func TestContainerd2Config(t *testing.T) {
	l := newLayout("/tmp/nk-x")
	conf, err := containerdConfig(Containerd2, l, binaries{runc: "/b/containerd2/runc"}, false)
	if err != nil {
		t.Fatal(err)
	}
	s := string(conf)
	for _, want := range []string{
		"version = 3\n",
		`address = "/tmp/nk-x/containerd.sock"`,
		`root = "/tmp/nk-x/root"`,
		`state = "/tmp/nk-x/state"`,
		`"io.containerd.nri.v1.nri"`,
		"[plugins.\"io.containerd.cri.v1.runtime\"]\n    restrict_oom_score_adj = true",
		"[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n      sandbox = \"" + SandboxImage + "\"",
		`bin_dirs = ["/usr/lib/cni"]`,
		`conf_dir = "/tmp/nk-x/cni/net.d"`,
		`BinaryName = "/b/containerd2/runc"`,
		`config_path = "/tmp/nk-x/certs.d"`,
		`cdi_spec_dirs = ["/tmp/nk-x/cdi"]`,
		"SystemdCgroup = false\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("config lacks %q:\n%s", want, s)
		}
	}
	// Config.CDIDirs come after the instance's own.
	l.cdiMore = []string{"/var/run/cdi"}
	conf, err = containerdConfig(Containerd2, l, binaries{runc: "/r"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := `cdi_spec_dirs = ["/tmp/nk-x/cdi", "/var/run/cdi"]`; !strings.Contains(string(conf), want) {
		t.Errorf("config with CDIDirs lacks %q:\n%s", want, conf)
	}
	l.cdiMore = nil
	// containerd 1.6 gets config version 2 and no v3 plugin IDs.
	conf, err = containerdConfig(Containerd16, l, binaries{runc: "/usr/sbin/runc"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(conf); !strings.Contains(s, "version = 2\n") || strings.Contains(s, "cri.v1") || strings.Contains(s, "nri") {
		t.Errorf("containerd 1.6 config:\n%s", s)
	}
	// Config.Systemd: both versions give runc the systemd cgroup driver.
	for _, v := range []string{Containerd16, Containerd2} {
		conf, err := containerdConfig(v, l, binaries{runc: "/r"}, true)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(conf); !strings.Contains(s, "SystemdCgroup = true\n") || strings.Contains(s, "SystemdCgroup = false") {
			t.Errorf("containerd %s with the systemd driver:\n%s", v, s)
		}
	}
}

// CDI spec dirs are for containerd 2 only, and absolute.
func TestValidateCDIDirs(t *testing.T) {
	for _, c := range []struct {
		version string
		dirs    []string
		ok      bool
	}{
		{Containerd2, nil, true},
		{Containerd16, nil, true},
		{Containerd2, []string{"/var/run/cdi"}, true},
		{Containerd16, []string{"/var/run/cdi"}, false},
		{Containerd2, []string{"var/run/cdi"}, false},
	} {
		if err := validateCDIDirs(c.version, c.dirs); (err == nil) != c.ok {
			t.Errorf("validateCDIDirs(%s, %q) = %v, want ok %v", c.version, c.dirs, err, c.ok)
		}
	}
}
