package volumemgr_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/volumemgr"
)

// TestUnsupportedVolumeSources walks every field of v1.VolumeSource: each
// source is either handled by a built-in plugin or fails at once with
// upstream's no-plugin error naming the source, without a set-up attempt
// or a FailedMount event from the reconciler. A source added to the API
// lands in the second group until a plugin claims it, so a new source can
// never be silently skipped.
func TestUnsupportedVolumeSources(t *testing.T) {
	supported := []string{"hostPath", "emptyDir", "secret", "downwardAPI", "configMap", "projected", "image"}
	rt := reflect.TypeFor[v1.VolumeSource]()
	for i := range rt.NumField() {
		field := rt.Field(i)
		vol := v1.Volume{Name: "data"}
		reflect.ValueOf(&vol.VolumeSource).Elem().Field(i).Set(reflect.New(field.Type.Elem()))
		source := volumemgr.SourceName(&vol)
		if want, _, _ := strings.Cut(field.Tag.Get("json"), ","); source != want {
			t.Errorf("SourceName(%s) = %q, want %q", field.Name, source, want)
		}
		if slices.Contains(supported, source) {
			continue
		}
		t.Run(source, func(t *testing.T) {
			f := newFixture(t)
			pod := testPod("p", vol, v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
			err := f.m.WaitForAttachAndMount(f.ctx, pod) // at once: no Reconcile is running
			want := `unmounted volumes=[data scratch], unattached volumes=[], failed to process volumes=[data]: ` +
				`failed to get Plugin from volumeSpec for volume "data" err=no volume plugin matched: ` + source + ` volumes are not supported by this node agent`
			if err == nil || err.Error() != want {
				t.Fatalf("err = %v\nwant %s", err, want)
			}
			if !errors.Is(err, volumemgr.ErrNoPluginMatched) {
				t.Errorf("err does not wrap ErrNoPluginMatched")
			}
			// The reconciler sets up what it can and leaves the rest alone.
			f.reconcile()
			f.step(10 * time.Second)
			if ev := f.events.all(); len(ev) != 0 {
				t.Errorf("reconciler events: %q", ev)
			}
			if got := volumeNames(f.m.MountedVolumes(pod.UID)); !slices.Equal(got, []string{"scratch"}) {
				t.Errorf("mounted %v, want [scratch]", got)
			}
			err = f.m.WaitForAttachAndMount(f.ctx, pod)
			want = strings.Replace(want, "[data scratch]", "[data]", 1)
			if err == nil || err.Error() != want {
				t.Fatalf("second wait: err = %v\nwant %s", err, want)
			}
		})
	}
}

// TestVolumeDevicesNeedTheirVolume: a raw block device from a claim is not
// skipped because no container mounts it.
func TestVolumeDevicesNeedTheirVolume(t *testing.T) {
	f := newFixture(t)
	pod := testPod("p")
	pod.Spec.Volumes = []v1.Volume{{Name: "disk", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}}
	pod.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "disk", DevicePath: "/dev/xvda"}}
	err := f.m.WaitForAttachAndMount(f.ctx, pod)
	if !errors.Is(err, volumemgr.ErrNoPluginMatched) || !strings.Contains(err.Error(), "failed to process volumes=[disk]") {
		t.Fatalf("err = %v", err)
	}
}

func volumeNames(vs []volumemgr.MountedVolume) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	slices.Sort(out)
	return out
}
