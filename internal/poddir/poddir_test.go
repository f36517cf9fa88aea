package poddir

import "testing"

func TestLayout(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Pods("/var/lib/kubelet"), "/var/lib/kubelet/pods"},
		{Pod("/var/lib/kubelet", "u1"), "/var/lib/kubelet/pods/u1"},
		{Volumes("/var/lib/kubelet", "u1"), "/var/lib/kubelet/pods/u1/volumes"},
		{Volume("/var/lib/kubelet", "u1", "kubernetes.io~empty-dir", "data"), "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/data"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
}
