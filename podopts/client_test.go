package podopts

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

func TestFromClient(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(
		configMap("ns1", "cfg", map[string]string{"a": "1"}),
		secret("ns1", "creds", map[string]string{"user": "admin"}),
		service("ns1", "db", "10.96.0.9", v1.ServicePort{Port: 5432}),
		service("default", "kubernetes", "10.96.0.1", v1.ServicePort{Port: 443}),
	)
	c := FromClient(clientgo.Wrap(cs))
	r := NewResolver(Config{ConfigMaps: c, Secrets: c, Services: c})
	pod := testPod(v1.Container{
		Name: "app",
		Env:  []v1.EnvVar{cmKeyEnv("A", "cfg", "a", false), secretKeyEnv("U", "creds", "user", false)},
	})
	pod.Spec.EnableServiceLinks = ptr(true)
	got, err := r.Envs(ctx, pod, &pod.Spec.Containers[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "1", "U": "admin", "DB_SERVICE_HOST": "10.96.0.9", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
	have := map[string]string{}
	for _, e := range got {
		have[e.Name] = e.Value
	}
	for k, v := range want {
		if have[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, have[k], v, have)
		}
	}

	// Not-found errors carry the kubelet's wording, not the API server's.
	for _, tc := range []struct {
		env  v1.EnvVar
		want string
	}{
		{cmKeyEnv("X", "nope", "a", false), `configmap "nope" not found`},
		{secretKeyEnv("X", "nope", "a", false), `secret "nope" not found`},
	} {
		pod.Spec.Containers[0].Env = []v1.EnvVar{tc.env}
		if _, err := r.Envs(ctx, pod, &pod.Spec.Containers[0], nil); err == nil || err.Error() != tc.want {
			t.Errorf("error = %v, want %q", err, tc.want)
		}
	}
	if _, err := c.GetConfigMap(ctx, "ns1", "cfg"); err != nil {
		t.Error(err)
	}
	if svcs, err := c.ListServices(ctx, metav1.NamespaceDefault); err != nil || len(svcs) != 1 {
		t.Errorf("ListServices = %v, %v", svcs, err)
	}
}
