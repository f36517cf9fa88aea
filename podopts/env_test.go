package podopts

import (
	"context"
	"errors"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
)

func testPod(containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "ns1", UID: "uid-1",
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"note": "hi \"there\""},
		},
		Spec: v1.PodSpec{
			NodeName:           "node-a",
			ServiceAccountName: "sa1",
			EnableServiceLinks: ptr(false),
			Containers:         containers,
		},
	}
}

func envStrings(envs []nodekit.EnvVar) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.Name + "=" + e.Value
	}
	return out
}

func fieldEnv(name, path string) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

func resEnv(name, container, res, divisor string) v1.EnvVar {
	sel := &v1.ResourceFieldSelector{ContainerName: container, Resource: res}
	if divisor != "" {
		sel.Divisor = resource.MustParse(divisor)
	}
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{ResourceFieldRef: sel}}
}

func cmKeyEnv(name, cm, key string, optional bool) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: cm}, Key: key, Optional: ptr(optional)}}}
}

func secretKeyEnv(name, s, key string, optional bool) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: s}, Key: key, Optional: ptr(optional)}}}
}

func cmFrom(name, prefix string, optional bool) v1.EnvFromSource {
	return v1.EnvFromSource{Prefix: prefix, ConfigMapRef: &v1.ConfigMapEnvSource{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Optional: ptr(optional)}}
}

func secretFrom(name, prefix string, optional bool) v1.EnvFromSource {
	return v1.EnvFromSource{Prefix: prefix, SecretRef: &v1.SecretEnvSource{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Optional: ptr(optional)}}
}

func newStore() *fakeStore {
	return &fakeStore{
		configMaps: map[string]*v1.ConfigMap{
			"ns1/cfg":   configMap("ns1", "cfg", map[string]string{"b": "2", "a": "1", "URL": "http://$(HOST)"}),
			"ns1/other": configMap("ns1", "other", map[string]string{"a": "other-a"}),
		},
		secrets: map[string]*v1.Secret{
			"ns1/creds": secret("ns1", "creds", map[string]string{"user": "admin", "pass": "s3cret"}),
		},
	}
}

func TestEnvs(t *testing.T) {
	alloc := v1.ResourceList{
		v1.ResourceCPU:              resource.MustParse("4"),
		v1.ResourceMemory:           resource.MustParse("8Gi"),
		v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	limited := v1.ResourceRequirements{
		Limits: v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("500m"),
			v1.ResourceMemory: resource.MustParse("64Mi"),
			"hugepages-2Mi":   resource.MustParse("4Mi"),
		},
		Requests: v1.ResourceList{
			v1.ResourceCPU:              resource.MustParse("250m"),
			v1.ResourceMemory:           resource.MustParse("32Mi"),
			v1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
		},
	}

	tests := []struct {
		name    string
		c       v1.Container
		mutate  func(*v1.Pod)
		podIPs  []string
		nodeIPs []string
		want    []string
		wantErr string
	}{{
		name: "plain values and expansion in declaration order",
		c: v1.Container{Env: []v1.EnvVar{
			{Name: "A", Value: "a"},
			{Name: "B", Value: "$(A)-b"},
			{Name: "C", Value: "$(D)"}, // defined later: left as written
			{Name: "D", Value: "d"},
			{Name: "E", Value: "$$(A) $(A)$(B)"},
			{Name: "F", Value: ""},
			{Name: "A", Value: "$(A)2"}, // redefinition sees the old value, keeps its slot
		}},
		want: []string{"A=a2", "B=a-b", "C=$(D)", "D=d", "E=$(A) aa-b", "F="},
	}, {
		name: "envFrom with prefix, sorted keys, env overrides and expands against it",
		c: v1.Container{
			EnvFrom: []v1.EnvFromSource{cmFrom("cfg", "CFG_", false), secretFrom("creds", "", false)},
			Env: []v1.EnvVar{
				{Name: "HOST", Value: "db"},
				{Name: "user", Value: "$(user)-$(CFG_a)"},
				{Name: "CFG_b", Value: "override"},
			},
		},
		want: []string{"CFG_URL=http://$(HOST)", "CFG_a=1", "CFG_b=override", "pass=s3cret", "user=admin-1", "HOST=db"},
	}, {
		name: "later envFrom source wins",
		c:    v1.Container{EnvFrom: []v1.EnvFromSource{cmFrom("cfg", "", false), cmFrom("other", "", false)}},
		want: []string{"URL=http://$(HOST)", "a=other-a", "b=2"},
	}, {
		name: "optional missing envFrom sources are skipped",
		c:    v1.Container{EnvFrom: []v1.EnvFromSource{cmFrom("nope", "", true), secretFrom("nope", "", true)}, Env: []v1.EnvVar{{Name: "X", Value: "x"}}},
		want: []string{"X=x"},
	}, {
		name:    "missing envFrom configmap",
		c:       v1.Container{EnvFrom: []v1.EnvFromSource{cmFrom("nope", "", false)}},
		wantErr: `configmap "nope" not found`,
	}, {
		name:    "missing envFrom secret",
		c:       v1.Container{EnvFrom: []v1.EnvFromSource{secretFrom("nope", "", false)}},
		wantErr: `secret "nope" not found`,
	}, {
		name: "configMapKeyRef and secretKeyRef",
		c: v1.Container{Env: []v1.EnvVar{
			cmKeyEnv("A", "cfg", "a", false),
			secretKeyEnv("P", "creds", "pass", false),
			{Name: "AP", Value: "$(A):$(P)"},
		}},
		want: []string{"A=1", "P=s3cret", "AP=1:s3cret"},
	}, {
		name:    "configMapKeyRef missing key",
		c:       v1.Container{Env: []v1.EnvVar{cmKeyEnv("A", "cfg", "zz", false)}},
		wantErr: "couldn't find key zz in ConfigMap ns1/cfg",
	}, {
		name:    "configMapKeyRef missing configmap",
		c:       v1.Container{Env: []v1.EnvVar{cmKeyEnv("A", "nope", "a", false)}},
		wantErr: `configmap "nope" not found`,
	}, {
		name:    "secretKeyRef missing key",
		c:       v1.Container{Env: []v1.EnvVar{secretKeyEnv("A", "creds", "zz", false)}},
		wantErr: "couldn't find key zz in Secret ns1/creds",
	}, {
		name:    "secretKeyRef missing secret",
		c:       v1.Container{Env: []v1.EnvVar{secretKeyEnv("A", "nope", "a", false)}},
		wantErr: `secret "nope" not found`,
	}, {
		name: "optional missing keys and objects are not set and do not override",
		c: v1.Container{
			EnvFrom: []v1.EnvFromSource{cmFrom("other", "", false)},
			Env: []v1.EnvVar{
				cmKeyEnv("a", "cfg", "zz", true),
				cmKeyEnv("B", "nope", "a", true),
				secretKeyEnv("C", "creds", "zz", true),
				secretKeyEnv("D", "nope", "a", true),
			},
		},
		want: []string{"a=other-a"},
	}, {
		name: "fieldRef paths",
		c: v1.Container{Env: []v1.EnvVar{
			fieldEnv("NAME", "metadata.name"),
			fieldEnv("NS", "metadata.namespace"),
			fieldEnv("UID", "metadata.uid"),
			fieldEnv("APP", "metadata.labels['app']"),
			fieldEnv("NONE", "metadata.labels['missing']"),
			fieldEnv("NOTE", "metadata.annotations['note']"),
			fieldEnv("LABELS", "metadata.labels"),
			fieldEnv("NODE", "spec.nodeName"),
			fieldEnv("SA", "spec.serviceAccountName"),
			fieldEnv("HOSTIP", "status.hostIP"),
			fieldEnv("HOSTIPS", "status.hostIPs"),
			fieldEnv("PODIP", "status.podIP"),
			fieldEnv("PODIPS", "status.podIPs"),
			{Name: "NOVERSION", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		}},
		podIPs:  []string{"fd00::5", "10.0.0.5", "10.0.0.6"},
		nodeIPs: []string{"192.168.1.10", "192.168.1.11", "fd00::10"},
		want: []string{
			"NAME=web", "NS=ns1", "UID=uid-1", "APP=web", "NONE=", `NOTE=hi "there"`,
			"LABELS=app=\"web\"\ntier=\"front\"", "NODE=node-a", "SA=sa1",
			"HOSTIP=192.168.1.10", "HOSTIPS=192.168.1.10,fd00::10",
			"PODIP=10.0.0.5", "PODIPS=10.0.0.5,fd00::5", "NOVERSION=web",
		},
	}, {
		name:    "pod IPs follow an IPv6 node's family",
		c:       v1.Container{Env: []v1.EnvVar{fieldEnv("PODIP", "status.podIP"), fieldEnv("PODIPS", "status.podIPs")}},
		podIPs:  []string{"10.0.0.5", "fd00:0::5"},
		nodeIPs: []string{"fd00::10"},
		want:    []string{"PODIP=fd00::5", "PODIPS=fd00::5,10.0.0.5"},
	}, {
		name: "pod IP before the sandbox has one",
		c:    v1.Container{Env: []v1.EnvVar{fieldEnv("PODIP", "status.podIP"), fieldEnv("PODIPS", "status.podIPs")}},
		want: []string{"PODIP=", "PODIPS="},
	}, {
		name:    "hostIP without node IPs",
		c:       v1.Container{Env: []v1.EnvVar{fieldEnv("H", "status.hostIP")}},
		wantErr: "host IP unknown; known addresses: []",
	}, {
		name:    "unsupported field path",
		c:       v1.Container{Env: []v1.EnvVar{fieldEnv("X", "spec.containers")}},
		wantErr: "field label not supported: spec.containers",
	}, {
		name:    "field selector that is not a downward-API field",
		c:       v1.Container{Env: []v1.EnvVar{fieldEnv("X", "status.phase")}},
		wantErr: "unsupported fieldPath: status.phase",
	}, {
		name:    "subscript on a field without one",
		c:       v1.Container{Env: []v1.EnvVar{fieldEnv("X", "spec.nodeName['a']")}},
		wantErr: "field label does not support subscript: spec.nodeName['a']",
	}, {
		name:    "invalid label key",
		c:       v1.Container{Env: []v1.EnvVar{fieldEnv("X", "metadata.labels['a b']")}},
		wantErr: "invalid key subscript in metadata.labels['a b']: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
	}, {
		name:    "unsupported api version",
		c:       v1.Container{Env: []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v2", FieldPath: "metadata.name"}}}}},
		wantErr: "unsupported pod version: v2",
	}, {
		name: "resourceFieldRef with limits, requests and divisors",
		c: v1.Container{Name: "app", Resources: limited, Env: []v1.EnvVar{
			resEnv("CPU_LIMIT", "", "limits.cpu", ""),
			resEnv("CPU_LIMIT_M", "", "limits.cpu", "1m"),
			resEnv("CPU_REQ_M", "", "requests.cpu", "1m"),
			resEnv("MEM_LIMIT", "", "limits.memory", ""),
			resEnv("MEM_LIMIT_MI", "", "limits.memory", "1Mi"),
			resEnv("MEM_REQ_MI", "", "requests.memory", "1Mi"),
			resEnv("EPH_LIMIT_GI", "", "limits.ephemeral-storage", "1Gi"),
			resEnv("EPH_REQ_GI", "", "requests.ephemeral-storage", "1Gi"),
			resEnv("HP_LIMIT", "", "limits.hugepages-2Mi", "1Mi"),
			resEnv("HP_REQ", "", "requests.hugepages-2Mi", ""),
		}},
		want: []string{
			"CPU_LIMIT=1", "CPU_LIMIT_M=500", "CPU_REQ_M=250", "MEM_LIMIT=67108864", "MEM_LIMIT_MI=64",
			"MEM_REQ_MI=32", "EPH_LIMIT_GI=100", "EPH_REQ_GI=1", "HP_LIMIT=4", "HP_REQ=0",
		},
	}, {
		name: "missing limits default to node allocatable",
		c: v1.Container{Name: "app", Env: []v1.EnvVar{
			resEnv("CPU", "", "limits.cpu", ""),
			resEnv("MEM", "", "limits.memory", "1Gi"),
			resEnv("REQ", "", "requests.cpu", "1m"),
		}},
		want: []string{"CPU=4", "MEM=8", "REQ=0"},
	}, {
		name: "pod-level limits come before node allocatable",
		c:    v1.Container{Name: "app", Env: []v1.EnvVar{resEnv("CPU", "", "limits.cpu", "1m"), resEnv("MEM", "", "limits.memory", "1Mi"), resEnv("EPH", "", "limits.ephemeral-storage", "1Gi")}},
		mutate: func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")}}
		},
		want: []string{"CPU=2000", "MEM=8192", "EPH=100"},
	}, {
		name: "resourceFieldRef of a named container",
		c:    v1.Container{Name: "app", Env: []v1.EnvVar{resEnv("SIDE", "side", "limits.memory", "1Mi"), resEnv("SIDECPU", "side", "limits.cpu", "")}},
		mutate: func(p *v1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "side", Resources: v1.ResourceRequirements{
				Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("10Mi")}}})
		},
		want: []string{"SIDE=10", "SIDECPU=4"},
	}, {
		name:    "resourceFieldRef of an unknown container",
		c:       v1.Container{Name: "app", Env: []v1.EnvVar{resEnv("X", "ghost", "limits.cpu", "")}},
		wantErr: "container ghost not found",
	}, {
		name:    "unsupported resource",
		c:       v1.Container{Name: "app", Env: []v1.EnvVar{resEnv("X", "", "limits.nvidia.com/gpu", "")}},
		wantErr: "unsupported container resource : limits.nvidia.com/gpu",
	}, {
		name:    "fileKeyRef is not served yet",
		c:       v1.Container{Env: []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "cfg", Path: "env", Key: "X"}}}}},
		wantErr: `cannot find the volume "cfg" referenced by FileKeyRef`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewResolver(Config{ConfigMaps: newStore(), Secrets: newStore(), NodeIPs: tt.nodeIPs, NodeAllocatable: alloc})
			pod := testPod(tt.c)
			if tt.mutate != nil {
				tt.mutate(pod)
			}
			got, err := r.Envs(context.Background(), pod, &pod.Spec.Containers[0], tt.podIPs)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Envs: %v", err)
			}
			if g := envStrings(got); !slices.Equal(g, tt.want) {
				t.Errorf("envs\n got %q\nwant %q", g, tt.want)
			}
		})
	}
}

func TestEnvsNoGetters(t *testing.T) {
	r := &Resolver{} // the zero Resolver
	for _, tc := range []struct {
		c    v1.Container
		want string
	}{
		{v1.Container{Env: []v1.EnvVar{cmKeyEnv("A", "cfg", "a", true)}}, "couldn't get configMap ns1/cfg, no kubeClient defined"},
		{v1.Container{Env: []v1.EnvVar{secretKeyEnv("A", "s", "a", true)}}, "couldn't get secret ns1/s, no kubeClient defined"},
		{v1.Container{EnvFrom: []v1.EnvFromSource{cmFrom("cfg", "", true)}}, "couldn't get configMap ns1/cfg, no kubeClient defined"},
	} {
		pod := testPod(tc.c)
		_, err := r.Envs(context.Background(), pod, &pod.Spec.Containers[0], nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("error = %v, want %q", err, tc.want)
		}
	}
}

func TestEnvsGetterErrorsPassThrough(t *testing.T) {
	boom := errors.New("apiserver unavailable")
	store := &fakeStore{err: boom}
	r := NewResolver(Config{ConfigMaps: store, Secrets: store})
	// Optional only excuses not-found, not other failures.
	pod := testPod(v1.Container{Env: []v1.EnvVar{cmKeyEnv("A", "cfg", "a", true)}})
	if _, err := r.Envs(context.Background(), pod, &pod.Spec.Containers[0], nil); !errors.Is(err, boom) {
		t.Fatalf("error = %v, want %v", err, boom)
	}
}

func TestEnvsFetchesEachObjectOnce(t *testing.T) {
	store := newStore()
	r := NewResolver(Config{ConfigMaps: store, Secrets: store})
	pod := testPod(v1.Container{
		EnvFrom: []v1.EnvFromSource{cmFrom("cfg", "", false), cmFrom("cfg", "X_", false)},
		Env:     []v1.EnvVar{cmKeyEnv("A", "cfg", "a", false), cmKeyEnv("B", "cfg", "b", false), secretKeyEnv("U", "creds", "user", false), secretKeyEnv("P", "creds", "pass", false)},
	})
	if _, err := r.Envs(context.Background(), pod, &pod.Spec.Containers[0], nil); err != nil {
		t.Fatal(err)
	}
	if n := store.calls["configmap/ns1/cfg"]; n != 1 {
		t.Errorf("configmap fetched %d times, want 1", n)
	}
	if n := store.calls["secret/ns1/creds"]; n != 1 {
		t.Errorf("secret fetched %d times, want 1", n)
	}
}

func TestEnvsInvalidEnvFromKeys(t *testing.T) {
	store := &fakeStore{
		configMaps: map[string]*v1.ConfigMap{"ns1/bad": configMap("ns1", "bad", map[string]string{"ok": "1", "a=b": "2", "tab\tkey": "3"})},
		secrets:    map[string]*v1.Secret{"ns1/bad": secret("ns1", "bad", map[string]string{"x=y": "1", "fine": "2"})},
	}
	ev := &fakeEvents{}
	r := NewResolver(Config{ConfigMaps: store, Secrets: store, Events: ev})
	pod := testPod(v1.Container{EnvFrom: []v1.EnvFromSource{cmFrom("bad", "P_", false), secretFrom("bad", "", false)}})
	got, err := r.Envs(context.Background(), pod, &pod.Spec.Containers[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"P_ok=1", "fine=2"}; !slices.Equal(envStrings(got), want) {
		t.Errorf("envs = %q, want %q", envStrings(got), want)
	}
	want := []string{
		"Warning InvalidEnvironmentVariableNames Keys [P_a=b, P_tab\tkey] from the EnvFrom configMap ns1/bad were skipped since they are considered invalid environment variable names.",
		"Warning InvalidEnvironmentVariableNames Keys [x=y] from the EnvFrom secret ns1/bad were skipped since they are considered invalid environment variable names.",
	}
	if !slices.Equal(ev.events, want) {
		t.Errorf("events\n got %q\nwant %q", ev.events, want)
	}
	// Without a recorder the keys are still skipped.
	r = NewResolver(Config{ConfigMaps: store, Secrets: store})
	if got, err = r.Envs(context.Background(), pod, &pod.Spec.Containers[0], nil); err != nil || len(got) != 2 {
		t.Errorf("without events: %q, %v", envStrings(got), err)
	}
}

func TestEnvsServiceLinks(t *testing.T) {
	store := &fakeStore{services: map[string][]*v1.Service{
		"default": {
			service("default", "kubernetes", "10.96.0.1", v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP}),
			service("default", "other", "10.96.0.2", v1.ServicePort{Port: 80}),
		},
		"ns1": {
			service("ns1", "my-db", "10.96.0.9",
				v1.ServicePort{Name: "sql", Port: 5432},
				v1.ServicePort{Name: "metrics-port", Port: 9100, Protocol: v1.ProtocolUDP}),
			service("ns1", "headless", v1.ClusterIPNone, v1.ServicePort{Port: 80}),
			service("ns1", "external", "", v1.ServicePort{Port: 80}),
		},
	}}
	kube := []string{
		"KUBERNETES_SERVICE_HOST=10.96.0.1",
		"KUBERNETES_SERVICE_PORT=443",
		"KUBERNETES_SERVICE_PORT_HTTPS=443",
		"KUBERNETES_PORT=tcp://10.96.0.1:443",
		"KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
		"KUBERNETES_PORT_443_TCP_PROTO=tcp",
		"KUBERNETES_PORT_443_TCP_PORT=443",
		"KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1",
	}
	db := []string{
		"MY_DB_SERVICE_HOST=10.96.0.9",
		"MY_DB_SERVICE_PORT=5432",
		"MY_DB_SERVICE_PORT_SQL=5432",
		"MY_DB_SERVICE_PORT_METRICS_PORT=9100",
		"MY_DB_PORT=tcp://10.96.0.9:5432",
		"MY_DB_PORT_5432_TCP=tcp://10.96.0.9:5432",
		"MY_DB_PORT_5432_TCP_PROTO=tcp",
		"MY_DB_PORT_5432_TCP_PORT=5432",
		"MY_DB_PORT_5432_TCP_ADDR=10.96.0.9",
		"MY_DB_PORT_9100_UDP=udp://10.96.0.9:9100",
		"MY_DB_PORT_9100_UDP_PROTO=udp",
		"MY_DB_PORT_9100_UDP_PORT=9100",
		"MY_DB_PORT_9100_UDP_ADDR=10.96.0.9",
	}
	for _, tc := range []struct {
		name  string
		links *bool
		ns    string
		env   []v1.EnvVar
		want  []string
	}{
		{name: "links off: only the kubernetes service", links: ptr(false), ns: "ns1", want: kube},
		{name: "links on: kubernetes and the namespace's", links: ptr(true), ns: "ns1", want: append(slices.Clone(kube), db...)},
		{name: "unset means on", links: nil, ns: "ns1", want: append(slices.Clone(kube), db...)},
		{name: "default namespace with links", links: ptr(true), ns: "default", want: append(slices.Clone(kube),
			"OTHER_SERVICE_HOST=10.96.0.2", "OTHER_SERVICE_PORT=80", "OTHER_PORT=tcp://10.96.0.2:80",
			"OTHER_PORT_80_TCP=tcp://10.96.0.2:80", "OTHER_PORT_80_TCP_PROTO=tcp", "OTHER_PORT_80_TCP_PORT=80", "OTHER_PORT_80_TCP_ADDR=10.96.0.2")},
		{name: "env overrides and expands service vars", links: ptr(false), ns: "ns1",
			env:  []v1.EnvVar{{Name: "KUBERNETES_SERVICE_PORT", Value: "1"}, {Name: "API", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}},
			want: append(append([]string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=1"}, kube[2:]...), "API=https://10.96.0.1:1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewResolver(Config{Services: store})
			pod := testPod(v1.Container{Env: tc.env})
			pod.Namespace = tc.ns
			pod.Spec.EnableServiceLinks = tc.links
			got, err := r.Envs(context.Background(), pod, &pod.Spec.Containers[0], nil)
			if err != nil {
				t.Fatal(err)
			}
			if g := envStrings(got); !slices.Equal(g, tc.want) {
				t.Errorf("envs\n got %q\nwant %q", g, tc.want)
			}
		})
	}

	t.Run("a namespace's own kubernetes service wins", func(t *testing.T) {
		own := &fakeStore{services: map[string][]*v1.Service{
			"default": {service("default", "kubernetes", "10.96.0.1", v1.ServicePort{Port: 443})},
			"ns1":     {service("ns1", "kubernetes", "10.96.7.7", v1.ServicePort{Port: 443})},
		}}
		pod := testPod(v1.Container{})
		pod.Spec.EnableServiceLinks = ptr(true)
		got, err := NewResolver(Config{Services: own}).Envs(context.Background(), pod, &pod.Spec.Containers[0], nil)
		if err != nil || got[0].Value != "10.96.7.7" {
			t.Errorf("got %q, %v; want the ns1 service first", envStrings(got), err)
		}
		if own.calls["services/default"] != 0 {
			t.Errorf("listed default although the namespace has its own kubernetes service")
		}
	})

	t.Run("list error", func(t *testing.T) {
		pod := testPod(v1.Container{})
		_, err := NewResolver(Config{Services: &fakeStore{err: errors.New("boom")}}).Envs(context.Background(), pod, &pod.Spec.Containers[0], nil)
		if err == nil || err.Error() != "failed to list services when setting up env vars: boom" {
			t.Errorf("error = %v", err)
		}
	})
}

func TestHostNetworkPodIPIsTheNodeIP(t *testing.T) {
	r := NewResolver(Config{NodeIPs: []string{"192.0.2.7"}})
	pod := &v1.Pod{Spec: v1.PodSpec{HostNetwork: true, Containers: []v1.Container{{Name: "c", Env: []v1.EnvVar{
		{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
	}}}}}
	envs, err := r.Envs(t.Context(), pod, &pod.Spec.Containers[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 1 || envs[0].Value != "192.0.2.7" {
		t.Fatalf("envs = %+v, want POD_IP=192.0.2.7", envs)
	}
}
