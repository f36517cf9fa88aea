package podopts_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/podopts"
)

func Example() {
	ctx := context.Background()
	root, _ := os.MkdirTemp("", "podopts-example")
	defer os.RemoveAll(root)

	configMaps := podopts.ConfigMapGetterFunc(func(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
		return &v1.ConfigMap{Data: map[string]string{"level": "debug"}}, nil
	})
	b := &podopts.Builder{
		Env: podopts.NewResolver(podopts.Config{ConfigMaps: configMaps, NodeIPs: []string{"192.168.1.10"}}),
		DNS: &podopts.DNSConfigurer{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local"},
	}

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "uid-1"},
		Spec: v1.PodSpec{
			Subdomain: "web",
			Containers: []v1.Container{{
				Name: "app",
				Env: []v1.EnvVar{
					{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					{Name: "LOG_LEVEL", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
						LocalObjectReference: v1.LocalObjectReference{Name: "settings"}, Key: "level"}}},
					{Name: "LISTEN", Value: "$(POD_IP):8080"},
				},
			}},
		},
	}

	sandbox, err := b.Sandbox(ctx, pod)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("hostname:", sandbox.Hostname, "domain:", sandbox.Domain)
	fmt.Println("nameservers:", sandbox.DNS.Servers, "search:", sandbox.DNS.Searches[0])

	podDir := func(p *v1.Pod) string { return filepath.Join(root, "pods", string(p.UID)) }
	opts, err := b.Options(podDir)(ctx, pod, &pod.Spec.Containers[0], []string{"10.244.0.7"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range opts.Envs {
		fmt.Printf("%s=%s\n", e.Name, e.Value)
	}
	for _, m := range opts.Mounts {
		rel, _ := filepath.Rel(root, m.HostPath)
		fmt.Println("mount", m.ContainerPath, "from", rel)
	}
	hosts, _ := os.ReadFile(opts.Mounts[0].HostPath)
	lines := strings.Split(strings.TrimSpace(string(hosts)), "\n")
	fmt.Println(lines[0])
	fmt.Println(lines[len(lines)-1])
	// Output:
	// hostname: web-0 domain: web.shop.svc.cluster.local
	// nameservers: [10.96.0.10] search: shop.svc.cluster.local
	// POD_IP=10.244.0.7
	// LOG_LEVEL=debug
	// LISTEN=10.244.0.7:8080
	// mount /etc/hosts from pods/uid-1/etc-hosts
	// # Kubernetes-managed hosts file.
	// 10.244.0.7	web-0.web.shop.svc.cluster.local	web-0
}
