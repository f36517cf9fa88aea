package csi

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
)

// The first of a PV's access modes is the CSI one, as upstream's.
func TestAccessMode(t *testing.T) {
	for _, c := range []struct {
		modes []v1.PersistentVolumeAccessMode
		want  csipb.VolumeCapability_AccessMode_Mode
	}{
		{nil, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOnce, v1.ReadWriteMany}, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{[]v1.PersistentVolumeAccessMode{v1.ReadOnlyMany, v1.ReadWriteOnce}, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteMany}, csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{[]v1.PersistentVolumeAccessMode{"Sideways"}, csipb.VolumeCapability_AccessMode_UNKNOWN},
	} {
		if got := accessMode(c.modes); got != c.want {
			t.Errorf("accessMode(%v) = %v, want %v", c.modes, got, c.want)
		}
	}
}
