package podutil

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func podWith(annotations map[string]string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", Annotations: annotations}}
}

func TestIsStatic(t *testing.T) {
	cases := []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{"no annotations", nil, false},
		{"other annotations only", map[string]string{"a": "b"}, false},
		{"api source", map[string]string{ConfigSourceAnnotation: "api"}, false},
		{"file source", map[string]string{ConfigSourceAnnotation: "file"}, true},
		{"http source", map[string]string{ConfigSourceAnnotation: "http"}, true},
		{"named source", map[string]string{ConfigSourceAnnotation: "file-etc"}, true},
		{"empty source counts as static", map[string]string{ConfigSourceAnnotation: ""}, true},
		{"mirror annotation alone", map[string]string{ConfigMirrorAnnotation: "h"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsStatic(podWith(tc.annotations)); got != tc.want {
				t.Errorf("IsStatic(%v) = %v, want %v", tc.annotations, got, tc.want)
			}
		})
	}
}

func TestIsMirror(t *testing.T) {
	cases := []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{"no annotations", nil, false},
		{"static pod", map[string]string{ConfigSourceAnnotation: "file"}, false},
		{"mirror with hash", map[string]string{ConfigMirrorAnnotation: "abc"}, true},
		{"mirror with empty value", map[string]string{ConfigMirrorAnnotation: ""}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsMirror(podWith(tc.annotations)); got != tc.want {
				t.Errorf("IsMirror(%v) = %v, want %v", tc.annotations, got, tc.want)
			}
		})
	}
}

func TestIsSidecar(t *testing.T) {
	policy := func(p v1.ContainerRestartPolicy) *v1.ContainerRestartPolicy { return &p }
	cases := []struct {
		name   string
		policy *v1.ContainerRestartPolicy
		want   bool
	}{
		{"no restart policy", nil, false},
		{"Always", policy(v1.ContainerRestartPolicyAlways), true},
		{"Never", policy(v1.ContainerRestartPolicyNever), false},
		{"OnFailure", policy(v1.ContainerRestartPolicyOnFailure), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1.Container{Name: "c", RestartPolicy: tc.policy}
			if got := IsSidecar(c); got != tc.want {
				t.Errorf("IsSidecar = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	pod := podWith(nil)
	if got, want := FullName(pod), "web_prod"; got != want {
		t.Errorf("FullName = %q, want %q", got, want)
	}
	if got, want := NamespacedKey(pod), "prod/web"; got != want {
		t.Errorf("NamespacedKey = %q, want %q", got, want)
	}
	name, ns, err := ParseFullName(FullName(pod))
	if err != nil || name != "web" || ns != "prod" {
		t.Errorf("ParseFullName(%q) = %q, %q, %v; want web, prod, nil", FullName(pod), name, ns, err)
	}
}

func TestParseFullNameRejects(t *testing.T) {
	for _, full := range []string{"", "web", "_prod", "web_", "prod/web", "web_prod_x"} {
		if name, ns, err := ParseFullName(full); err == nil {
			t.Errorf("ParseFullName(%q) = %q, %q, nil; want an error", full, name, ns)
		}
	}
}
