package criruntime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
)

// blockMkdir is a Localhost seccomp profile (OCI/Docker JSON) that allows
// everything but mkdir, which fails with EPERM.
const blockMkdir = `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}`

// TestSecurityIntegration checks on a real containerd (1.6 or 2)
// that the pod's security fields reach the container's process, and that
// what this runtime cannot do is refused as upstream kubelet refuses it.
func TestSecurityIntegration(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	ctx := t.Context()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "seccomp", "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "seccomp", "profiles", "block-mkdir.json"), []byte(blockMkdir), 0o644); err != nil {
		t.Fatal(err)
	}
	newRuntime := func(seccompDefault bool) *criruntime.Runtime {
		rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: t.TempDir(), RootDir: root, SeccompDefault: seccompDefault})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close(context.Background()) })
		return rt
	}
	rt, rtDefault := newRuntime(false), newRuntime(true)
	const probe = "grep Seccomp: /proc/self/status; mkdir /tmp/made && echo mkdir-ok || echo mkdir-failed"

	for _, tc := range []struct {
		name   string
		rt     *criruntime.Runtime
		pod    *v1.SecurityContext
		podSC  *v1.PodSecurityContext
		wants  []string
		absent string
	}{
		{name: "RuntimeDefault", rt: rt, pod: &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
			wants: []string{"Seccomp:\t2", "mkdir-ok"}},
		{name: "Localhost under root-dir/seccomp", rt: rt,
			podSC: &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/block-mkdir.json")}},
			wants: []string{"Seccomp:\t2", "Operation not permitted", "mkdir-failed"}, absent: "mkdir-ok"},
		{name: "Unconfined", rt: rt, pod: &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}},
			wants: []string{"Seccomp:\t0", "mkdir-ok"}},
		{name: "nothing set, seccompDefault false", rt: rt, wants: []string{"Seccomp:\t0"}},
		{name: "nothing set, seccompDefault true", rt: rtDefault, wants: []string{"Seccomp:\t2"}},
		{name: "Unconfined explicit, seccompDefault true", rt: rtDefault,
			pod: &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}}, wants: []string{"Seccomp:\t0"}},
		// No SELinux on this host: the runtime ignores the options and
		// the pod runs, as with upstream kubelet.
		{name: "SELinux options on a host without SELinux", rt: rt,
			podSC: &v1.PodSecurityContext{SELinuxOptions: &v1.SELinuxOptions{Type: "container_t", Level: "s0:c1,c2"}}, wants: []string{"mkdir-ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := busyboxPod("sec-"+strings.ToLower(strings.NewReplacer(" ", "-", ",", "", "/", "-").Replace(tc.name)), "sh", "-c", probe)
			pod.Spec.SecurityContext = tc.podSC
			pod.Spec.Containers[0].SecurityContext = tc.pod
			if err := tc.rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
				t.Fatalf("SyncPod: %v", err)
			}
			st := waitExited(t, tc.rt, pod, "app")
			b, err := os.ReadFile(st.LogPath)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(string(b), w) {
					t.Errorf("container output %q lacks %q", b, w)
				}
			}
			if tc.absent != "" && strings.Contains(string(b), tc.absent) {
				t.Errorf("container output %q has %q", b, tc.absent)
			}
			t.Logf("container output: %q", b)
			killAndRemove(t, tc.rt, pod)
		})
	}

	t.Run("hostUsers false: a user namespace on containerd 2, refused on 1.6", func(t *testing.T) {
		pod := busyboxPod("userns", "sh", "-c", "cat /proc/self/uid_map; id -u; cat /data/secret")
		pod.Spec.HostUsers = ptr.To(false)
		// A volume as the agent leaves it: a file of host root's, 0600.
		// Container root reads it only through an idmapped mount.
		data := t.TempDir()
		if err := os.WriteFile(filepath.Join(data, "secret"), []byte("only-root-reads-me\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		volume := func(context.Context, *v1.Pod, *v1.Container, []string) (*nodekit.ContainerOptions, error) {
			return &nodekit.ContainerOptions{Mounts: []nodekit.Mount{{ContainerPath: "/data", HostPath: data}}}, nil
		}
		res := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Options: volume, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
		if cri.Version == agenttest.ContainerdVersion2 {
			// containerd 2 with runc 1.5 runs user namespaces: the
			// container's root is an unprivileged host ID of the pod's
			// own 65536-ID range, not host root.
			if err := res.Err(); err != nil {
				t.Fatalf("SyncPod on containerd 2: %v", err)
			}
			st := waitExited(t, rt, pod, "app")
			b, err := os.ReadFile(st.LogPath)
			if err != nil {
				t.Fatal(err)
			}
			var inside, outside, length uint64
			if _, err := fmt.Sscan(uidMapLine(string(b)), &inside, &outside, &length); err != nil || st.ExitCode != 0 {
				t.Fatalf("container in a user namespace: exit %d, output %q (%v)", st.ExitCode, b, err)
			}
			if inside != 0 || outside == 0 || length != 65536 || outside%65536 != 0 {
				t.Errorf("uid_map %d %d %d, want 0 -> a non-zero multiple of 65536, length 65536", inside, outside, length)
			}
			if !strings.Contains(string(b), "only-root-reads-me") {
				t.Errorf("container root could not read host root's 0600 file on its (idmapped) volume: %q", b)
			}
			t.Logf("container output: %q", b)
			killAndRemove(t, rt, pod)
			return
		}
		var ae *nodekit.ActionError
		const want = "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
		if !errors.As(res.Err(), &ae) || ae.Reason != nodekit.ErrCreatePodSandbox || ae.Message != want {
			t.Fatalf("SyncPod: %v, want ErrCreatePodSandbox %q", res.Err(), want)
		}
		pods, err := rt.ListPods(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if p.ID == pod.UID {
				t.Fatalf("a sandbox was created for the refused pod: %+v", p)
			}
		}
	})

	t.Run("supplementalGroupsPolicy: Merge and Strict honoured on containerd 2, Strict refused on 1.6 (no such feature)", func(t *testing.T) {
		node := &v1.Node{}
		if err := rt.SetNodeStatus(ctx, node); err != nil {
			t.Fatal(err)
		}
		if cri.Version == agenttest.ContainerdVersion2 {
			// containerd 2 reports the feature.
			if f := node.Status.Features; f == nil || f.SupplementalGroupsPolicy == nil || !*f.SupplementalGroupsPolicy {
				t.Fatalf("containerd 2 published features %+v, want supplementalGroupsPolicy true", f)
			}
			supplementalGroupsOnContainerd2(t, cri, rt)
			return
		}
		if node.Status.Features != nil {
			t.Fatalf("containerd 1.6 published features %+v", node.Status.Features)
		}
		pod := busyboxPod("strict", "true")
		pod.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyStrict)}
		d := admission.NewSupplementalGroupsPolicy(admission.NodeFunc(func(context.Context) (*v1.Node, error) { return node, nil })).
			Admit(ctx, nodekit.AdmitRequest{Pod: pod})
		want := nodekit.Decision{Reason: "SupplementalGroupsPolicyNotSupported", Message: "SupplementalGroupsPolicy=Strict is not supported in this node"}
		if d != want {
			t.Fatalf("decision %+v, want %+v", d, want)
		}
	})
}

// uidMapLine is the first line of the container's log that reads as a
// uid_map entry (the CRI log format prefixes each line with a timestamp,
// the stream and a tag).
func uidMapLine(log string) string {
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 { // time stream tag inside outside length
			return strings.Join(f[3:], " ")
		}
	}
	return ""
}

// supplementalGroupsOnContainerd2 runs agnhost's user-defined-in-image
// (uid 1000, in group 50000 in the image's /etc/group) with supplemental
// group 60000 under each policy, as upstream's e2e test does: Merge adds
// the image's groups, Strict does not, and the container status's user is
// what the process runs with.
func supplementalGroupsOnContainerd2(t *testing.T, cri *agenttest.Containerd, rt *criruntime.Runtime) {
	if !cri.HasImage(agenttest.AgnhostImage) {
		agenttest.RequireIntegration(t, "agnhost image", errors.New("no agnhost image (build _output/bin/agnhost)"))
	}
	for _, tc := range []struct {
		policy v1.SupplementalGroupsPolicy
		groups []int64
	}{
		{v1.SupplementalGroupsPolicyMerge, []int64{1000, 50000, 60000}},
		{v1.SupplementalGroupsPolicyStrict, []int64{1000, 60000}},
	} {
		pod := busyboxPod("groups-"+strings.ToLower(string(tc.policy)), "id", "-G")
		pod.Spec.Containers[0].Image = agenttest.AgnhostImage
		pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), SupplementalGroups: []int64{60000}, SupplementalGroupsPolicy: ptr.To(tc.policy)}
		if err := rt.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
			t.Fatalf("SyncPod %s: %v", tc.policy, err)
		}
		st := waitExited(t, rt, pod, "app")
		b, err := os.ReadFile(st.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		wantID := strings.Trim(fmt.Sprint(tc.groups), "[]")
		if f := strings.Fields(strings.TrimSpace(string(b))); st.ExitCode != 0 || len(f) < 4 || strings.Join(f[3:], " ") != wantID {
			t.Errorf("%s: id -G exit %d, log %q, want %q", tc.policy, st.ExitCode, b, wantID)
		}
		want := &v1.ContainerUser{Linux: &v1.LinuxContainerUser{UID: 1000, GID: 1000, SupplementalGroups: tc.groups}}
		if st.User == nil || st.User.Linux == nil || st.User.Linux.UID != want.Linux.UID || st.User.Linux.GID != want.Linux.GID ||
			fmt.Sprint(st.User.Linux.SupplementalGroups) != fmt.Sprint(tc.groups) {
			t.Errorf("%s: status user %+v, want %+v", tc.policy, st.User, want.Linux)
		}
		killAndRemove(t, rt, pod)
	}
}
