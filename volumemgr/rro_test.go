package volumemgr_test

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/volumemgr"
)

type rroChecker bool

func (c rroChecker) SupportsRecursiveReadOnly(context.Context, *v1.Pod) bool { return bool(c) }

// TestRecursiveReadOnlyMounts: recursiveReadOnly resolved as upstream,
// against whether the pod's runtime handler supports it.
func TestRecursiveReadOnlyMounts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		supported bool
		mode      v1.RecursiveReadOnlyMode
		readOnly  bool
		prop      *v1.MountPropagationMode
		want      bool
		err       string
	}{
		{name: "Enabled, supported", supported: true, mode: v1.RecursiveReadOnlyEnabled, readOnly: true, want: true},
		{name: "IfPossible, supported", supported: true, mode: v1.RecursiveReadOnlyIfPossible, readOnly: true, want: true},
		{name: "IfPossible, unsupported", mode: v1.RecursiveReadOnlyIfPossible, readOnly: true},
		{name: "Disabled", supported: true, mode: v1.RecursiveReadOnlyDisabled, readOnly: true},
		{name: "Enabled, unsupported", mode: v1.RecursiveReadOnlyEnabled, readOnly: true,
			err: `failed to resolve recursive read-only mode: volume "v" requested recursive read-only mode, but it is not supported by the runtime`},
		{name: "Enabled, not read-only", supported: true, mode: v1.RecursiveReadOnlyEnabled,
			err: `volume "v" requested recursive read-only mode, but it is not read-only`},
		{name: "Enabled, propagation", supported: true, mode: v1.RecursiveReadOnlyEnabled, readOnly: true, prop: ptr.To(v1.MountPropagationHostToContainer),
			err: `volume "v" requested recursive read-only mode, but it is not compatible with propagation "HostToContainer"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *volumemgr.Config) { c.RecursiveReadOnly = rroChecker(tc.supported) })
			pod := testPod("web", v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
			vm := &pod.Spec.Containers[0].VolumeMounts[0]
			vm.ReadOnly, vm.RecursiveReadOnly, vm.MountPropagation = tc.readOnly, &tc.mode, tc.prop
			f.mount(pod)
			ms, err := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0])
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ContainerMounts = %+v, %v; want error %q", ms, err, tc.err)
				}
				return
			}
			if err != nil || len(ms) != 1 || ms[0].RecursiveReadOnly != tc.want || ms[0].ReadOnly != tc.readOnly {
				t.Fatalf("ContainerMounts = %+v, %v; want one mount, recursive read-only %v", ms, err, tc.want)
			}
		})
	}
}
