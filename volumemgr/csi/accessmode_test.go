package csi

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// The first of a PV's access modes is the one the driver gets, mapped as
// upstream maps it for a driver without and with SINGLE_NODE_MULTI_WRITER.
func TestAccessMode(t *testing.T) {
	const (
		snw  = csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
		snmw = csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
		snsw = csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		mnro = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		mnmw = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	)
	for _, c := range []struct {
		modes               []v1.PersistentVolumeAccessMode
		legacy, multiWriter csipb.VolumeCapability_AccessMode_Mode
	}{
		{nil, snw, snmw},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOnce, v1.ReadWriteMany}, snw, snmw},
		{[]v1.PersistentVolumeAccessMode{v1.ReadOnlyMany, v1.ReadWriteOnce}, mnro, mnro},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteMany}, mnmw, mnmw},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}, snw, snsw},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod, v1.ReadWriteOnce}, snw, snsw},
		{[]v1.PersistentVolumeAccessMode{"Sideways"}, csipb.VolumeCapability_AccessMode_UNKNOWN, csipb.VolumeCapability_AccessMode_UNKNOWN},
	} {
		mode := firstAccessMode(c.modes)
		if got := csiAccessMode(mode, false); got != c.legacy {
			t.Errorf("%v without SINGLE_NODE_MULTI_WRITER: %v, want %v", c.modes, got, c.legacy)
		}
		if got := csiAccessMode(mode, true); got != c.multiWriter {
			t.Errorf("%v with SINGLE_NODE_MULTI_WRITER: %v, want %v", c.modes, got, c.multiWriter)
		}
	}
}

// Only a PV whose one access mode is ReadWriteOncePod is kept to one pod.
func TestSinglePod(t *testing.T) {
	for _, c := range []struct {
		modes []v1.PersistentVolumeAccessMode
		want  bool
	}{
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}, true},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod, v1.ReadWriteOnce}, false},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, false},
		{nil, false},
	} {
		s := &source{pv: &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{AccessModes: c.modes}}}
		if got := s.singlePod(); got != c.want {
			t.Errorf("%v: singlePod %v, want %v", c.modes, got, c.want)
		}
	}
	if (&source{}).singlePod() {
		t.Errorf("an inline volume is kept to one pod")
	}
}

// The node applies fsGroup as upstream's supportsFSGroup decides.
func TestAppliesFSGroup(t *testing.T) {
	gid := int64(1234)
	withGroup := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{FSGroup: &gid}}}
	pv := func(fsType string, modes ...v1.PersistentVolumeAccessMode) *source {
		return &source{fsType: fsType, pv: &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{AccessModes: modes}}}
	}
	const (
		none = storagev1.NoneFSGroupPolicy
		file = storagev1.FileFSGroupPolicy
		rwo  = storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	)
	for _, c := range []struct {
		name string
		src  *source
		pod  *v1.Pod
		pol  storagev1.FSGroupPolicy
		want bool
	}{
		{"no fsGroup", pv("ext4", v1.ReadWriteOnce), &v1.Pod{}, file, false},
		{"None", pv("ext4", v1.ReadWriteOnce), withGroup, none, false},
		{"File, no fsType, RWX", pv("", v1.ReadWriteMany), withGroup, file, true},
		{"File, read-only", &source{readOnly: true, pv: &v1.PersistentVolume{}}, withGroup, file, false},
		{"RWOWithFSType, RWO", pv("ext4", v1.ReadWriteOnce), withGroup, rwo, true},
		{"RWOWithFSType, RWOP", pv("ext4", v1.ReadWriteOncePod), withGroup, rwo, true},
		{"RWOWithFSType, RWX then RWO", pv("ext4", v1.ReadWriteMany, v1.ReadWriteOnce), withGroup, rwo, true},
		{"RWOWithFSType, RWX", pv("ext4", v1.ReadWriteMany), withGroup, rwo, false},
		{"RWOWithFSType, no access modes", pv("ext4"), withGroup, rwo, false},
		{"RWOWithFSType, no fsType", pv("", v1.ReadWriteOnce), withGroup, rwo, false},
		{"RWOWithFSType, inline with fsType", &source{fsType: "ext4"}, withGroup, rwo, true},
	} {
		if got := c.src.appliesFSGroup(c.pod, c.pol); got != c.want {
			t.Errorf("%s: appliesFSGroup %v, want %v", c.name, got, c.want)
		}
	}
}
