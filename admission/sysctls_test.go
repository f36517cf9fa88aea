package admission_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
)

func TestSafeSysctlsByKernel(t *testing.T) {
	old := admission.SafeSysctls("4.4.0")
	if slices.Contains(old, "net.ipv4.tcp_keepalive_time") || !slices.Contains(old, "net.ipv4.ip_local_reserved_ports") {
		t.Errorf("4.4 kernel: %v", old)
	}
	if got := admission.SafeSysctls("6.1.0-13-amd64"); len(got) != 14 {
		t.Errorf("6.1 kernel: %d safe sysctls, want all 14: %v", len(got), got)
	}
	if got := admission.SafeSysctls("garbage"); len(got) != 5 {
		t.Errorf("unknown kernel: %v, want the 5 always-safe ones", got)
	}
}

func TestSysctlsAdmission(t *testing.T) {
	allow, err := admission.NewSysctls(append(admission.SafeSysctls("6.1.0"), "kernel.msg*", "net.core.somaxconn", "user.*", "fs.mqueue.*", "kernel.domainname"))
	if err != nil {
		t.Fatal(err)
	}
	hostUsers := false
	for _, tc := range []struct {
		name      string
		sysctls   []string
		hostNet   bool
		hostIPC   bool
		hostUsers *bool
		reject    string
	}{
		{name: "none"},
		{name: "safe", sysctls: []string{"kernel.shm_rmid_forced", "net.ipv4.tcp_syncookies"}},
		{name: "slash form", sysctls: []string{"net/ipv4/ip_local_port_range"}},
		{name: "allowed unsafe", sysctls: []string{"net.core.somaxconn"}},
		{name: "allowed prefix", sysctls: []string{"kernel.msgmax"}},
		{name: "unsafe", sysctls: []string{"kernel.shm_rmid_forced", "kernel.shmmax"}, reject: `forbidden sysctl: "kernel.shmmax" not allowlisted`},
		{name: "net with host network", sysctls: []string{"net.core.somaxconn"}, hostNet: true, reject: `forbidden sysctl: "net.core.somaxconn" not allowed with host Net enabled`},
		{name: "ipc prefix", sysctls: []string{"kernel.msgmnb"}, hostUsers: &hostUsers},
		{name: "ipc with host ipc", sysctls: []string{"kernel.shm_rmid_forced"}, hostIPC: true, reject: `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host IPC enabled`},
		{name: "ipc prefix with host ipc", sysctls: []string{"fs/mqueue/msg_max"}, hostIPC: true, reject: `forbidden sysctl: "fs.mqueue.msg_max" not allowed with host IPC enabled`},
		{name: "net ignores host ipc", sysctls: []string{"net.core.somaxconn"}, hostIPC: true},
		{name: "user with default host users", sysctls: []string{"user.max_user_namespaces"}, reject: `forbidden sysctl: "user.max_user_namespaces" not allowed with host User enabled`},
		{name: "user in a user namespace", sysctls: []string{"user.max_user_namespaces"}, hostUsers: &hostUsers},
		{name: "uts with host network", sysctls: []string{"kernel.domainname"}, hostNet: true, hostIPC: true},
		{name: "first forbidden one is named", sysctls: []string{"kernel.msgmax", "vm.swappiness", "kernel.shmmax"}, reject: `forbidden sysctl: "vm.swappiness" not allowlisted`},
		{name: "prefix is not a name", sysctls: []string{"kernel.ms"}, reject: `forbidden sysctl: "kernel.ms" not allowlisted`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &v1.Pod{Spec: v1.PodSpec{HostNetwork: tc.hostNet, HostIPC: tc.hostIPC, HostUsers: tc.hostUsers}}
			if tc.sysctls != nil {
				pod.Spec.SecurityContext = &v1.PodSecurityContext{}
				for _, s := range tc.sysctls {
					pod.Spec.SecurityContext.Sysctls = append(pod.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: s, Value: "1"})
				}
			}
			d := allow.Admit(context.Background(), nodekit.AdmitRequest{Pod: pod})
			if tc.reject == "" {
				if !d.Admit {
					t.Fatalf("rejected: %+v", d)
				}
				return
			}
			if d.Admit || d.Reason != "SysctlForbidden" || d.Message != tc.reject {
				t.Fatalf("decision %+v, want SysctlForbidden %q", d, tc.reject)
			}
		})
	}
}

func TestSysctlsBadPatterns(t *testing.T) {
	for _, tc := range []struct{ pattern, err string }{
		{"Kernel.ShmMax", `sysctl "Kernel.ShmMax" must have at most 253 characters and match regex`},
		{"net..core", `sysctl "net..core" must have at most 253 characters`},
		{"net." + strings.Repeat("a", 250), "must have at most 253 characters"},
		{"vm.swappiness", `the sysctls "vm.swappiness" are not known to be namespaced`},
		{"vm/*", `the sysctls "vm." are not known to be namespaced`},
		{"kernel.*", `the sysctls "kernel." are not known to be namespaced`},
	} {
		_, err := admission.NewSysctls([]string{"net.core.somaxconn", tc.pattern})
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("NewSysctls(%q) = %v, want an error containing %q", tc.pattern, err, tc.err)
		}
	}
}
