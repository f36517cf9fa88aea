package main

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestServiceLinks: a pod gets the service-link variables of its
// namespace's Services (read from the agent's service informer once it has
// synced, not LISTed per pod) and the kubernetes Service's, and a pod
// with enableServiceLinks false only the kubernetes Service's.
func TestServiceLinks(t *testing.T) {
	e := startEnv(t)
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "backend"}, Spec: v1.ServiceSpec{
		Ports: []v1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}}}}
	created, err := e.client.CoreV1().Services("default").Create(t.Context(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the informer's watch brings the Service
	env := func(name string, links bool) string {
		t.Helper()
		pod := simplePod(name, v1.RestartPolicyNever, "env")
		pod.Spec.EnableServiceLinks = ptr.To(links)
		e.createPod(t, pod)
		e.waitPod(t, name, 60*time.Second, "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
		b, err := e.client.CoreV1().Pods("default").GetLogs(name, &v1.PodLogOptions{Container: "app"}).DoRaw(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	out := env("links", true)
	for _, want := range []string{"BACKEND_SERVICE_HOST=" + created.Spec.ClusterIP, "BACKEND_SERVICE_PORT=8080", "BACKEND_PORT_8080_TCP_PORT=8080", "KUBERNETES_SERVICE_HOST="} {
		if !strings.Contains(out, want+"\n") && !strings.Contains(out, want) {
			t.Errorf("pod env lacks %s:\n%s", want, out)
		}
	}
	out = env("nolinks", false)
	if strings.Contains(out, "BACKEND_SERVICE_HOST") || !strings.Contains(out, "KUBERNETES_SERVICE_HOST=") {
		t.Errorf("enableServiceLinks false: env\n%s\nwant the kubernetes Service's variables only", out)
	}
}
