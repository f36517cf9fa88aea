package criruntime

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/selinux"
)

// TestSELinuxRelabelMounts: CRI selinux_relabel is set on the mounts that
// ask for it and on the termination-message file only where SELinux is
// enabled, as upstream's kuberuntime (v.SELinuxRelabel &&
// selinux.GetEnabled()); on a host without SELinux, and with the real
// detector on such a host, no mount carries it.
func TestSELinuxRelabelMounts(t *testing.T) {
	dir := t.TempDir()
	mounts := []nodekit.Mount{
		{Name: "data", ContainerPath: "/data", HostPath: dir, SELinuxRelabel: true},
		{Name: "host", ContainerPath: "/host", HostPath: dir},
	}
	opts := func(context.Context, *v1.Pod, *v1.Container, []string) (*nodekit.ContainerOptions, error) {
		return &nodekit.ContainerOptions{Mounts: mounts, PodContainerDir: t.TempDir()}, nil
	}
	enabled, disabled := []bool{true, false, true}, []bool{false, false, false}
	thisHost := disabled
	if (selinux.Host{}).Enabled() {
		thisHost = enabled
	}
	for _, tc := range []struct {
		name  string
		host  SELinuxHost
		wants []bool // data, host, termination log
	}{
		{"enabled", SELinuxHostFunc(func() bool { return true }), enabled},
		{"disabled", SELinuxHostFunc(func() bool { return false }), disabled},
		{"this host", nil, thisHost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, rs, is := newFakeWith(t, Config{SELinux: tc.host})
			is.SetFakeImages([]string{"busybox:1.36"})
			pod := testPod(v1.Container{Name: "app", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent,
				TerminationMessagePath: "/dev/termination-log"})
			res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Options: opts,
				Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
			if err := res.Err(); err != nil {
				t.Fatal(err)
			}
			cfg := configOf(t, rs, "app")
			if cfg == nil || len(cfg.Mounts) != len(tc.wants) {
				t.Fatalf("app config = %+v", cfg)
			}
			for i, want := range tc.wants {
				if got := cfg.Mounts[i].SelinuxRelabel; got != want {
					t.Errorf("mount %s: selinux_relabel = %v, want %v", cfg.Mounts[i].ContainerPath, got, want)
				}
			}
		})
	}
}
