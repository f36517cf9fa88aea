package criruntime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
)

var (
	unconfined     = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	runtimeDefault = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	testMasked     = []string{"/proc/kcore", "/sys/firmware"}
	testNS         = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD,
		UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}}
)

// base is the context of a container with no security settings at all.
func base() *runtimeapi.LinuxContainerSecurityContext {
	return &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: testNS, MaskedPaths: testMasked, ReadonlyPaths: defaultReadonlyPaths, Seccomp: unconfined,
	}
}

func TestContainerSecurityContext(t *testing.T) {
	selPod := &v1.SELinuxOptions{User: "system_u", Role: "system_r", Type: "pod_t", Level: "s0:c1,c2"}
	selCtr := &v1.SELinuxOptions{Type: "ctr_t"}
	for _, tc := range []struct {
		name           string
		pod            v1.PodSecurityContext
		ctr            *v1.SecurityContext
		annotations    map[string]string
		seccompDefault bool
		want           func(sc *runtimeapi.LinuxContainerSecurityContext)
		wantErr        string
	}{
		{name: "nothing set: unconfined, default masked paths", want: func(*runtimeapi.LinuxContainerSecurityContext) {}},
		{name: "seccompDefault: RuntimeDefault when unset", seccompDefault: true,
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.Seccomp = runtimeDefault }},
		{name: "seccompDefault: explicit Unconfined stays", seccompDefault: true,
			ctr:  &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}},
			want: func(*runtimeapi.LinuxContainerSecurityContext) {}},
		{name: "pod Localhost joined under root-dir/seccomp",
			pod: v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/block.json")}},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/root/seccomp/profiles/block.json"}
			}},
		{name: "container RuntimeDefault beats pod Localhost",
			pod:  v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("x.json")}},
			ctr:  &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.Seccomp = runtimeDefault }},
		{name: "Localhost without a path fails",
			ctr:     &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost}},
			wantErr: "localhostProfile must be set if seccompProfile type is Localhost."},
		{name: "AppArmor container field beats annotation and pod field",
			pod:         v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}},
			ctr:         &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}},
			annotations: map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "localhost/other"},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Apparmor, sc.ApparmorProfile = runtimeDefault, "runtime/default"
			}},
		{name: "AppArmor annotation beats pod field",
			pod:         v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}},
			annotations: map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "localhost/k8s-deny-write"},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "k8s-deny-write"}
				sc.ApparmorProfile = "localhost/k8s-deny-write"
			}},
		{name: "AppArmor annotation of another container ignored; pod field used",
			pod:         v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}},
			annotations: map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "sidecar": "runtime/default"},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Apparmor, sc.ApparmorProfile = unconfined, "unconfined"
			}},
		{name: "AppArmor Localhost without a name fails",
			ctr:     &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost}},
			wantErr: "missing localhost apparmor profile name"},
		{name: "SELinux from the pod",
			pod:  v1.PodSecurityContext{SELinuxOptions: selPod},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.SelinuxOptions = selinuxOptions(selPod) }},
		{name: "SELinux of the container replaces the pod's whole",
			pod: v1.PodSecurityContext{SELinuxOptions: selPod},
			ctr: &v1.SecurityContext{SELinuxOptions: selCtr},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.SelinuxOptions = &runtimeapi.SELinuxOption{Type: "ctr_t"}
			}},
		{name: "procMount Unmasked: nothing masked or read-only",
			ctr: &v1.SecurityContext{ProcMount: ptr.To(v1.UnmaskedProcMount)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.MaskedPaths, sc.ReadonlyPaths = []string{}, []string{}
			}},
		{name: "procMount Default keeps the paths",
			ctr:  &v1.SecurityContext{ProcMount: ptr.To(v1.DefaultProcMount)},
			want: func(*runtimeapi.LinuxContainerSecurityContext) {}},
		{name: "allowPrivilegeEscalation false sets no_new_privs",
			ctr:  &v1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.NoNewPrivs = true }},
		{name: "users: container overrides pod, groups fsGroup first, Strict policy",
			pod: v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](2000), FSGroup: ptr.To[int64](3000),
				SupplementalGroups: []int64{4000, 5000}, SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyStrict)},
			ctr: &v1.SecurityContext{RunAsUser: ptr.To[int64](1001)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.RunAsUser, sc.RunAsGroup = &runtimeapi.Int64Value{Value: 1001}, &runtimeapi.Int64Value{Value: 2000}
				sc.SupplementalGroups = []int64{3000, 4000, 5000}
				sc.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
			}},
		{name: "unknown supplementalGroupsPolicy fails",
			pod:     v1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicy("Loose"))},
			wantErr: "unsupported supplementalGroupsPolicy: Loose"},
		{name: "privileged, read-only root, capabilities",
			ctr: &v1.SecurityContext{Privileged: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true),
				Capabilities: &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}, Drop: []v1.Capability{"ALL"}}},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Privileged, sc.ReadonlyRootfs = true, true
				sc.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"ALL"}}
			}},
		{name: "runAsNonRoot with runAsUser 0 fails",
			pod:     v1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			ctr:     &v1.SecurityContext{RunAsUser: ptr.To[int64](0)},
			wantErr: "container's runAsUser breaks non-root policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: tc.annotations},
				Spec: v1.PodSpec{SecurityContext: &tc.pod, Containers: []v1.Container{{Name: "app", SecurityContext: tc.ctr}}}}
			pol := securityPolicy{seccompRoot: "/root/seccomp", seccompDefault: tc.seccompDefault, maskedPaths: testMasked}
			got, err := containerSecurityContext(pod, &pod.Spec.Containers[0], &runtimeapi.Image{}, testNS, pol)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := base()
			tc.want(want)
			if !proto.Equal(got, want) {
				t.Fatalf("got\n%s\nwant\n%s", prototext.Format(got), prototext.Format(want))
			}
		})
	}
}

func TestSandboxSecurityContext(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{
		SecurityContext: &v1.PodSecurityContext{
			SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("strict.json")},
			RunAsUser:      ptr.To[int64](1000), RunAsGroup: ptr.To[int64](2000), FSGroup: ptr.To[int64](3000),
			SupplementalGroups: []int64{4000}, SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyStrict),
			SELinuxOptions: &v1.SELinuxOptions{Level: "s0:c1"},
		},
		Containers:          []v1.Container{{Name: "app"}},
		EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "dbg", SecurityContext: &v1.SecurityContext{Privileged: ptr.To(true)}}}},
	}}
	got, err := sandboxSecurityContext(pod, testNS)
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: testNS,
		// The pod's profile is for its containers; the sandbox always gets
		// the runtime's default, as upstream.
		Seccomp:    runtimeDefault,
		Privileged: true,
		RunAsUser:  &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 2000},
		SupplementalGroups: []int64{3000, 4000}, SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict,
		SelinuxOptions: &runtimeapi.SELinuxOption{Level: "s0:c1"},
	}
	if !proto.Equal(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", prototext.Format(got), prototext.Format(want))
	}
}

func hostUsersPod() *v1.Pod {
	pod := testPod(v1.Container{Name: "app", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent})
	pod.Spec.HostUsers = ptr.To(false)
	return pod
}

func TestHostUsersFalseOnRuntimeWithoutUserns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		handlers []*runtimeapi.RuntimeHandler
		handler  string
		want     string
	}{
		{"no handlers reported (containerd 1.6)", nil, "",
			"Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{"default handler without the feature", []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{}}}, "",
			"Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{"runtime class handler without the feature", []*runtimeapi.RuntimeHandler{{Name: "kata", Features: &runtimeapi.RuntimeHandlerFeatures{}}}, "kata",
			"Failed to create pod sandbox: can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces"},
		{"unknown handler", []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}}, "gvisor",
			"Failed to create pod sandbox: can't set `spec.hostUsers: false`, RuntimeClass handler \"gvisor\" does not support user namespaces: the handler \"gvisor\" is not known"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, rs, is := newFake(t)
			rs.handlers = tc.handlers
			is.SetFakeImages([]string{"busybox:1.36"})
			res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: hostUsersPod(), Sandbox: nodekit.SandboxOptions{RuntimeHandler: tc.handler},
				Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
			var ae *nodekit.ActionError
			if !errors.As(res.Err(), &ae) || ae.Reason != nodekit.ErrCreatePodSandbox || ae.Message != tc.want {
				t.Fatalf("SyncPod: %v (%#v), want ErrCreatePodSandbox %q", res.Err(), ae, tc.want)
			}
			if len(rs.sandboxConfigs) != 0 {
				t.Fatalf("a sandbox was created: %v", rs.sandboxConfigs)
			}
		})
	}
}

func TestHostUsersFalseMapsPodRange(t *testing.T) {
	root := t.TempDir()
	// A node range of one pod's IDs: the range a pod gets is known.
	r, rs, is := newFakeWith(t, Config{RootDir: root, UserNamespaceFirstID: 65536, UserNamespaceLength: 65536})
	rs.handlers = []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}}
	is.SetFakeImages([]string{"busybox:1.36"})
	pod := hostUsersPod()
	pod.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
	volume := func(context.Context, *v1.Pod, *v1.Container, []string) (*nodekit.ContainerOptions, error) {
		return &nodekit.ContainerOptions{Mounts: []nodekit.Mount{{ContainerPath: "/data", HostPath: filepath.Join(root, "data")}},
			PodContainerDir: filepath.Join(root, "containers")}, nil
	}
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Options: volume, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	ids := []*runtimeapi.IDMapping{{HostId: 65536, ContainerId: 0, Length: 65536}}
	want := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids, Gids: ids}
	sb := rs.sandboxConfigs[res.SandboxID].GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if !proto.Equal(sb, want) {
		t.Fatalf("sandbox userns %v, want %v", sb, want)
	}
	for _, c := range rs.containerConfigs {
		if got := c.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); !proto.Equal(got, want) {
			t.Fatalf("container userns %v, want %v", got, want)
		}
		// As upstream, every mount (the volume and the termination log)
		// carries the namespace's mappings: the runtime idmaps it.
		if len(c.GetMounts()) != 2 {
			t.Fatalf("mounts %v, want the volume and the termination log", c.GetMounts())
		}
		for _, m := range c.GetMounts() {
			got := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m.GetUidMappings(), Gids: m.GetGidMappings()}
			if !proto.Equal(got, want) {
				t.Fatalf("mount %s mappings uids %v gids %v, want %v", m.GetContainerPath(), m.GetUidMappings(), m.GetGidMappings(), ids)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "pods", string(pod.UID), "userns")); err != nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	// A new Runtime on the same root dir (an agent restart) gives the pod
	// the same range and the next pod the other (the node range holds two).
	r2, rs2, is2 := newFakeWith(t, Config{RootDir: root, UserNamespaceFirstID: 65536, UserNamespaceLength: 2 * 65536})
	rs2.handlers, rs2.FakeStatus = rs.handlers, rs.FakeStatus
	is2.SetFakeImages([]string{"busybox:1.36"})
	other := hostUsersPod()
	other.UID, other.Name = "uid-2", "other"
	for _, p := range []*v1.Pod{pod, other} {
		cfg, err := r2.sandboxConfig(t.Context(), p, 0, nodekit.SandboxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions().GetUids()[0].GetHostId()
		if wantHost := map[*v1.Pod]uint32{pod: 65536, other: 131072}[p]; got != wantHost {
			t.Fatalf("after restart pod %s maps to host ID %d, want %d", p.Name, got, wantHost)
		}
	}
}

func TestHostUsersUnsetIsNodeNamespace(t *testing.T) {
	r, _, _ := newFake(t)
	cfg, err := r.sandboxConfig(t.Context(), testPod(v1.Container{Name: "app"}), 0, nodekit.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); got.GetMode() != runtimeapi.NamespaceMode_NODE || len(got.GetUids()) != 0 {
		t.Fatalf("userns %v, want mode NODE without mappings, as upstream", got)
	}
}

func TestHostUsersUnsetMountsNotIdmapped(t *testing.T) {
	r, rs, is := newFake(t)
	is.SetFakeImages([]string{"busybox:1.36"})
	pod := testPod(v1.Container{Name: "app", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent})
	volume := func(context.Context, *v1.Pod, *v1.Container, []string) (*nodekit.ContainerOptions, error) {
		return &nodekit.ContainerOptions{Mounts: []nodekit.Mount{{ContainerPath: "/data", HostPath: t.TempDir()}}}, nil
	}
	if err := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Options: volume, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range rs.containerConfigs {
		for _, m := range c.GetMounts() {
			if len(m.GetUidMappings()) != 0 || len(m.GetGidMappings()) != 0 {
				t.Fatalf("mount %s of a host-users pod has mappings %v %v", m.GetContainerPath(), m.GetUidMappings(), m.GetGidMappings())
			}
		}
		if len(c.GetMounts()) != 1 {
			t.Fatalf("mounts %v, want the volume", c.GetMounts())
		}
	}
}

func TestUserNamespaceIDsPerPodChecked(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, ""}, {65536, ""}, {4 * 65536, ""},
		{1000, "userNamespaces.idsPerPod must not be less than 65536"},
		{65536 + 1, "userNamespaces.idsPerPod must be a multiple of 65536"},
		{1 << 32, "userNamespaces.idsPerPod must not be more than 4294967295"},
	} {
		rs := &recordingRuntime{FakeRuntimeService: critest.NewFakeRuntimeService()}
		_, err := NewFromServices(t.Context(), rs, critest.NewFakeImageService(), Config{Endpoint: "fake", UserNamespaceIDsPerPod: tc.n})
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("idsPerPod %d: %v, want %q", tc.n, err, tc.want)
		}
	}
}

// TestUserNamespaceRangeCheckedAtStart: the node's ID range is checked when
// the runtime is built, as kubelet checks it at start, not when the first
// pod with hostUsers: false asks.
func TestUserNamespaceRangeCheckedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"default", Config{UserNamespaceMaxPods: 110}, ""},
		{"subids", Config{UserNamespaceFirstID: 65536, UserNamespaceLength: 65536 * 110, UserNamespaceMaxPods: 110}, ""},
		{"too few for maxPods", Config{UserNamespaceFirstID: 65536, UserNamespaceLength: 65536 * 10, UserNamespaceMaxPods: 110},
			"create user namespace manager: userns: kubelet user assigned IDs are not enough to support 110 pods"},
		{"unaligned", Config{UserNamespaceFirstID: 1000, UserNamespaceLength: 65536 * 10},
			"kubelet user assigned ID 1000 is not a multiple of 65536"},
		{"host root", Config{UserNamespaceFirstID: 0, UserNamespaceLength: 65536 * 10},
			"kubelet user assigned ID 0 must be greater or equal to 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := &recordingRuntime{FakeRuntimeService: critest.NewFakeRuntimeService()}
			tc.cfg.Endpoint, tc.cfg.RootDir = "fake", t.TempDir()
			_, err := NewFromServices(t.Context(), rs, critest.NewFakeImageService(), tc.cfg)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("NewFromServices: %v, want %q", err, tc.want)
			}
		})
	}
}
