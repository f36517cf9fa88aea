package podopts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit"
)

func TestBuilderOptions(t *testing.T) {
	volume := nodekit.Mount{Name: "data", ContainerPath: "/data", HostPath: "/var/lib/nodekit/pods/uid-1/volumes/data"}
	etcHostsVolume := nodekit.Mount{Name: "hosts", ContainerPath: "/etc/hosts", HostPath: "/elsewhere"}
	nodeHosts := "127.0.0.1 localhost\n192.168.1.10 node-a\n"

	tests := []struct {
		name       string
		mutate     func(*v1.Pod)
		podIPs     []string
		volumes    []nodekit.Mount
		noPodDir   bool
		wantMounts []string // container paths
		wantHosts  string   // "" = no file written
		wantErr    string
	}{
		{name: "pod network", podIPs: []string{"10.0.0.5"}, volumes: []nodekit.Mount{volume},
			wantMounts: []string{"/data", "/etc/hosts"},
			wantHosts:  hostsPreamble + "10.0.0.5\tdb-0.db.ns1.svc.cluster.local\tdb-0\n"},
		{name: "host network copies the node's file", podIPs: nil, mutate: func(p *v1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.HostAliases = []v1.HostAlias{{IP: "10.1.1.1", Hostnames: []string{"foo"}}}
		}, wantMounts: []string{"/etc/hosts"},
			wantHosts: "# Kubernetes-managed hosts file (host network).\n" + nodeHosts + "\n# Entries added by HostAliases.\n10.1.1.1\tfoo\n"},
		{name: "no pod IP yet: no hosts file", podIPs: nil, wantMounts: nil},
		{name: "container mounts /etc/hosts itself", podIPs: []string{"10.0.0.5"}, mutate: func(p *v1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "hosts", MountPath: "/etc/hosts"}}
		}, wantMounts: nil},
		{name: "volume hook mounts /etc/hosts", podIPs: []string{"10.0.0.5"}, volumes: []nodekit.Mount{etcHostsVolume}, wantMounts: []string{"/etc/hosts"}},
		{name: "no pod dir", podIPs: []string{"10.0.0.5"}, noPodDir: true, volumes: []nodekit.Mount{volume}, wantMounts: []string{"/data"}},
		{name: "invalid hostname", podIPs: []string{"10.0.0.5"}, mutate: func(p *v1.Pod) { p.Spec.Hostname = "UPPER" },
			wantErr: `pod Hostname "UPPER" is not a valid DNS label`},
		{name: "env error", podIPs: []string{"10.0.0.5"}, mutate: func(p *v1.Pod) {
			p.Spec.Containers[0].Env = []v1.EnvVar{cmKeyEnv("A", "cfg", "missing", false)}
		}, wantErr: "couldn't find key missing in ConfigMap ns1/cfg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			root := t.TempDir()
			store := newStore()
			b := &Builder{
				Env:           NewResolver(Config{ConfigMaps: store, Secrets: store}),
				DNS:           &DNSConfigurer{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local"},
				NodeHostsFile: "/host/etc/hosts",
				ReadFile:      readFrom(map[string]string{"/host/etc/hosts": nodeHosts}),
				VolumeMounts: func(context.Context, *v1.Pod, *v1.Container) ([]nodekit.Mount, error) {
					return slices.Clone(tt.volumes), nil
				},
			}
			pod := testPod(v1.Container{Name: "app", Env: []v1.EnvVar{{Name: "GREETING", Value: "hi"}}})
			pod.Spec.Hostname, pod.Spec.Subdomain = "db-0", "db"
			if tt.mutate != nil {
				tt.mutate(pod)
			}
			podDir := func(p *v1.Pod) string { return filepath.Join(root, "pods", string(p.UID)) }
			if tt.noPodDir {
				podDir = nil
			}
			opts, err := b.Options(podDir)(ctx, pod, &pod.Spec.Containers[0], tt.podIPs)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want prefix %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(opts.Envs, []nodekit.EnvVar{{Name: "GREETING", Value: "hi"}}) {
				t.Errorf("envs = %v", opts.Envs)
			}
			var paths []string
			for _, m := range opts.Mounts {
				paths = append(paths, m.ContainerPath)
			}
			if !slices.Equal(paths, tt.wantMounts) {
				t.Errorf("mounts = %q, want %q", paths, tt.wantMounts)
			}
			hostsPath := filepath.Join(root, "pods", "uid-1", "etc-hosts")
			if tt.noPodDir {
				if opts.PodContainerDir != "" {
					t.Errorf("PodContainerDir = %q without a pod dir", opts.PodContainerDir)
				}
			} else if want := filepath.Join(root, "pods", "uid-1", "containers"); opts.PodContainerDir != want {
				t.Errorf("PodContainerDir = %q, want %q", opts.PodContainerDir, want)
			}
			if tt.wantHosts == "" {
				if _, err := os.Stat(hostsPath); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("hosts file written: %v", err)
				}
				return
			}
			assertFile(t, hostsPath, tt.wantHosts)
			if last := opts.Mounts[len(opts.Mounts)-1]; last != HostsMount(hostsPath) {
				t.Errorf("hosts mount = %+v", last)
			}
		})
	}
}

func TestBuilderOptionsErrors(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pod := testPod(v1.Container{Name: "app"})
	boom := errors.New("volume not attached")
	b := &Builder{VolumeMounts: func(context.Context, *v1.Pod, *v1.Container) ([]nodekit.Mount, error) { return nil, boom }}
	if _, err := b.Options(nil)(ctx, pod, &pod.Spec.Containers[0], nil); !errors.Is(err, boom) {
		t.Errorf("volume hook error = %v", err)
	}

	pod.Spec.HostNetwork = true
	b = &Builder{ReadFile: readFrom(nil)}
	dir := t.TempDir()
	if _, err := b.Options(func(*v1.Pod) string { return dir })(ctx, pod, &pod.Spec.Containers[0], nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unreadable node hosts file: error = %v", err)
	}

	// The zero Builder still resolves plain env and needs no files.
	pod = testPod(v1.Container{Name: "app", Env: []v1.EnvVar{{Name: "A", Value: "a"}, {Name: "B", Value: "$(A)"}}})
	opts, err := (&Builder{}).Options(nil)(ctx, pod, &pod.Spec.Containers[0], []string{"10.0.0.5"})
	if err != nil || len(opts.Envs) != 2 || opts.Envs[1].Value != "a" || len(opts.Mounts) != 0 {
		t.Errorf("zero Builder: %+v, %v", opts, err)
	}
}

func TestBuilderSandbox(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pod := testPod(v1.Container{Name: "app"})
	pod.Spec.Hostname, pod.Spec.Subdomain = "db-0", "db"

	got, err := (&Builder{}).Sandbox(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if want := (nodekit.SandboxOptions{Hostname: "db-0", Domain: "db.ns1.svc."}); !reflect.DeepEqual(got, want) {
		t.Errorf("no DNS: %+v, want %+v", got, want)
	}

	b := &Builder{DNS: &DNSConfigurer{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local"}}
	got, err = b.Sandbox(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	want := nodekit.SandboxOptions{Hostname: "db-0", Domain: "db.ns1.svc.cluster.local", DNS: &nodekit.DNSConfig{
		Servers:  []string{"10.96.0.10"},
		Searches: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"},
		Options:  []string{"ndots:5"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sandbox = %+v %+v, want %+v %+v", got, got.DNS, want, want.DNS)
	}

	pod.Spec.SetHostnameAsFQDN = ptr(true)
	if got, err = b.Sandbox(ctx, pod); err != nil || got.Hostname != "db-0.db.ns1.svc.cluster.local" {
		t.Errorf("FQDN hostname = %q, %v", got.Hostname, err)
	}
	pod.Spec.Hostname = strings.Repeat("h", 40)
	if _, err = b.Sandbox(ctx, pod); err == nil || !strings.Contains(err.Error(), "is too long") {
		t.Errorf("long FQDN: error = %v", err)
	}
}
