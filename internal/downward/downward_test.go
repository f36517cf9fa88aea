package downward

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMetadataValue(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1",
		Labels: map[string]string{"b": "2", "a": `x"y`}, Annotations: map[string]string{"k": "v"}}}
	cases := []struct {
		path, want string
		ok, err    bool
	}{
		{"metadata.name", "web", true, false},
		{"metadata.uid", "u1", true, false},
		{"metadata.labels", "a=\"x\\\"y\"\nb=\"2\"", true, false},
		{"metadata.labels['b']", "2", true, false},
		{"metadata.annotations['k']", "v", true, false},
		{"metadata.labels['bad key!']", "", true, true},
		{"spec.nodeName['x']", "", true, true},
		{"spec.nodeName", "", false, false},
	}
	for _, tc := range cases {
		got, ok, err := MetadataValue(pod, tc.path)
		if got != tc.want || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("%s: %q %v %v, want %q %v err=%v", tc.path, got, ok, err, tc.want, tc.ok, tc.err)
		}
	}
}
