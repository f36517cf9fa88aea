package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
)

// TestRecursiveReadOnlyMounts: a hostPath directory with a tmpfs mounted
// below it, mounted read-only three ways. On containerd 2 (its runc
// handler reports recursive read-only mounts) recursiveReadOnly Enabled
// and IfPossible make the tmpfs read-only in the container too, a plain
// read-only mount leaves it writable, and the container statuses say
// Enabled, Enabled, Disabled, as upstream's e2e spec checks. On
// containerd 1.6 (no handler features) Enabled fails the container with
// upstream's message and IfPossible mounts plain read-only.
func TestRecursiveReadOnlyMounts(t *testing.T) {
	e := startEnv(t)
	host := t.TempDir()
	sub := filepath.Join(host, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(sub, syscall.MNT_DETACH) })

	pod := func(name string, modes ...v1.RecursiveReadOnlyMode) *v1.Pod {
		p := simplePod(name, v1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Volumes = []v1.Volume{{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: host}}}}
		for _, m := range modes {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts,
				v1.VolumeMount{Name: "host", MountPath: "/mnt-" + strings.ToLower(string(m)), ReadOnly: true, RecursiveReadOnly: ptr.To(m)})
		}
		return p
	}
	writable := func(p *v1.Pod, dir string) bool {
		_, code, err := e.tryExec(t, p, "app", "touch", dir+"/sub/f")
		if err != nil {
			t.Fatal(err)
		}
		return code == 0
	}
	modeOf := func(p *v1.Pod, path string) string {
		for _, vm := range containerStatus(p, "app").VolumeMounts {
			if vm.MountPath == path && vm.RecursiveReadOnly != nil {
				return string(*vm.RecursiveReadOnly)
			}
		}
		return "none"
	}

	if e.cri.Version == agenttest.ContainerdVersion16 {
		e.createPod(t, pod("rro-enabled", v1.RecursiveReadOnlyEnabled))
		e.createPod(t, pod("rro-ifpossible", v1.RecursiveReadOnlyIfPossible))
		want := `failed to resolve recursive read-only mode: volume "host" requested recursive read-only mode, but it is not supported by the runtime`
		e.waitPod(t, "rro-enabled", 60*time.Second, "CreateContainerConfigError", func(p *v1.Pod) bool {
			c := containerStatus(p, "app")
			return c != nil && c.State.Waiting != nil && c.State.Waiting.Reason == "CreateContainerConfigError" && strings.Contains(c.State.Waiting.Message, want)
		})
		p := e.waitPod(t, "rro-ifpossible", 60*time.Second, "Running", func(p *v1.Pod) bool { return ready(p, "app") })
		if !writable(p, "/mnt-ifpossible") || modeOf(p, "/mnt-ifpossible") != "Disabled" {
			t.Errorf("IfPossible without runtime support: submount writable %v, status %s; want a plain read-only mount, Disabled", writable(p, "/mnt-ifpossible"), modeOf(p, "/mnt-ifpossible"))
		}
		return
	}

	e.createPod(t, pod("rro", v1.RecursiveReadOnlyEnabled, v1.RecursiveReadOnlyIfPossible, v1.RecursiveReadOnlyDisabled))
	p := e.waitPod(t, "rro", 60*time.Second, "Running", func(p *v1.Pod) bool { return ready(p, "app") })
	for dir, want := range map[string]struct {
		writable bool
		mode     string
	}{
		"/mnt-enabled": {false, "Enabled"}, "/mnt-ifpossible": {false, "Enabled"}, "/mnt-disabled": {true, "Disabled"},
	} {
		if got := writable(p, dir); got != want.writable {
			t.Errorf("%s/sub writable = %v, want %v", dir, got, want.writable)
		}
		if got := modeOf(p, dir); got != want.mode {
			t.Errorf("%s recursiveReadOnly in the status = %s, want %s", dir, got, want.mode)
		}
	}
}
