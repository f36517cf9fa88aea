package devicemgr

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekit/nodekit"
)

func TestValidateRegistration(t *testing.T) {
	ok := func(r *pluginapi.RegisterRequest) *pluginapi.RegisterRequest {
		if r.Version == "" {
			r.Version = pluginapi.Version
		}
		if r.Endpoint == "" {
			r.Endpoint = "foo.sock"
		}
		return r
	}
	for _, tc := range []struct {
		req  *pluginapi.RegisterRequest
		want string
	}{
		{ok(&pluginapi.RegisterRequest{ResourceName: "example.com/foo"}), ""},
		{ok(&pluginapi.RegisterRequest{ResourceName: "nvidia.com/gpu"}), ""},
		{ok(&pluginapi.RegisterRequest{ResourceName: "example.com/foo", Version: "v1alpha1"}), `requested API version "v1alpha1" is not supported by kubelet. Supported version is ["v1beta1"]`},
		{ok(&pluginapi.RegisterRequest{ResourceName: "cpu"}), `the ResourceName "cpu" is invalid: it is a native resource name`},
		{ok(&pluginapi.RegisterRequest{ResourceName: "kubernetes.io/foo"}), `the ResourceName "kubernetes.io/foo" is invalid: the kubernetes.io/ domain is reserved`},
		{ok(&pluginapi.RegisterRequest{ResourceName: "requests.example.com/foo"}), `the ResourceName "requests.example.com/foo" is invalid: extended resource names may not start with requests.`},
		{ok(&pluginapi.RegisterRequest{ResourceName: "example.com/f o"}), `the ResourceName "example.com/f o" is invalid: name part must consist of`},
		{ok(&pluginapi.RegisterRequest{ResourceName: ""}), `the ResourceName "" is invalid: it is empty`},
		{ok(&pluginapi.RegisterRequest{ResourceName: "example.com/foo", Endpoint: "../foo.sock"}), `the Endpoint "../foo.sock" is invalid: it must be the name of the plugin's socket file in /dp`},
		{ok(&pluginapi.RegisterRequest{ResourceName: "example.com/foo", Endpoint: "/tmp/foo.sock"}), `the Endpoint "/tmp/foo.sock" is invalid`},
		{ok(&pluginapi.RegisterRequest{ResourceName: "example.com/foo", Endpoint: SocketName}), `the Endpoint "kubelet.sock" is invalid`},
	} {
		err := validateRegistration("/dp", tc.req)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: unexpected error %v", tc.req, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want %q", tc.req, err, tc.want)
		}
	}
}

// Init containers' devices are reused by later containers; a sidecar's
// are not; an app container never shares with another.
func TestInitContainerReuse(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := newTestManager(t, ctx, Config{})
	ep := attach(m, "example.com/foo", &fakeClient{resource: "example.com/foo"}, nil)
	report(ctx, m, ep, map[string]bool{"d0": true, "d1": true, "d2": true, "d3": true})

	always := v1.ContainerRestartPolicyAlways
	sidecar := container("sidecar", map[string]int{"example.com/foo": 1})
	sidecar.RestartPolicy = &always
	pod := newPod("p", []v1.Container{
		container("init", map[string]int{"example.com/foo": 2}),
		sidecar,
	},
		container("app1", map[string]int{"example.com/foo": 1}),
		container("app2", map[string]int{"example.com/foo": 2}),
	)
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatalf("rejected: %+v", d)
	}
	h := held(m)["p"]
	get := func(c string) string { return strings.Join(sets.List(h[c]["example.com/foo"]), ",") }
	// init takes d0,d1; the sidecar reuses d0 and keeps it; app1 reuses
	// d1; app2 needs two more from the free d2,d3.
	for c, want := range map[string]string{"init": "d0,d1", "sidecar": "d0", "app1": "d1", "app2": "d2,d3"} {
		if got := get(c); got != want {
			t.Errorf("%s holds %s, want %s", c, got, want)
		}
	}
	// Nothing is left for anyone else.
	other := newPod("q", nil, container("app", map[string]int{"example.com/foo": 1}))
	d := m.Admit(ctx, nodekit.AdmitRequest{Pod: other, Pods: []*v1.Pod{pod}})
	want := "Allocate failed due to requested number of devices unavailable for example.com/foo. Requested: 1, Available: 0, which is unexpected"
	if d.Admit || d.Reason != "UnexpectedAdmissionError" || d.Message != want {
		t.Errorf("decision = %+v, want %q", d, want)
	}
}

// The plugin's preferred devices are taken when free and healthy.
func TestPreferredAllocation(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := newTestManager(t, ctx, Config{})
	var asked []string
	client := &fakeClient{resource: "example.com/foo", preferred: func(available, must []string, size int) []string {
		asked = available
		return []string{"d3", "d1", "d0"} // d0 is unhealthy: not taken
	}}
	ep := attach(m, "example.com/foo", client, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true})
	report(ctx, m, ep, map[string]bool{"d0": false, "d1": true, "d2": true, "d3": true})
	pod := newPod("p", nil, container("app", map[string]int{"example.com/foo": 2}))
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatalf("rejected: %+v", d)
	}
	if got := strings.Join(sets.List(held(m)["p"]["app"]["example.com/foo"]), ","); got != "d1,d3" {
		t.Errorf("holds %s, want d1,d3", got)
	}
	if strings.Join(asked, ",") != "d1,d2,d3" {
		t.Errorf("plugin offered %v, want the healthy free devices", asked)
	}
}

// ContainerOptions calls PreStartContainer when the plugin asks for it,
// allocates a container admitted before a restart lost it, and merges
// several plugins' answers.
func TestContainerOptions(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	active := &podSet{}
	m := newTestManager(t, ctx, Config{ActivePods: active.list})
	foo := &fakeClient{resource: "example.com/foo"}
	ep := attach(m, "example.com/foo", foo, &pluginapi.DevicePluginOptions{PreStartRequired: true})
	report(ctx, m, ep, map[string]bool{"f0": true, "f1": true})
	bar := &fakeClient{resource: "example.com/bar"}
	ep = attach(m, "example.com/bar", bar, nil)
	report(ctx, m, ep, map[string]bool{"b0": true})

	pod := newPod("p", nil, container("app", map[string]int{"example.com/foo": 1, "example.com/bar": 1, "cpu": 1}))
	active.add(pod)
	// Never admitted (say the agent restarted in between): allocated now.
	opts, err := m.ContainerOptions(ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	want := &nodekit.ContainerOptions{Envs: []nodekit.EnvVar{{Name: "EXAMPLE_COM_BAR", Value: "b0"}, {Name: "EXAMPLE_COM_FOO", Value: "f0"}}}
	if !equalOptions(opts, want) {
		t.Errorf("options = %+v, want %+v", opts, want)
	}
	if len(foo.prestarts) != 1 || strings.Join(foo.prestarts[0], ",") != "f0" || len(bar.prestarts) != 0 {
		t.Errorf("PreStartContainer calls: foo %v, bar %v", foo.prestarts, bar.prestarts)
	}
	// Again: no new allocation, another PreStartContainer.
	if _, err := m.ContainerOptions(ctx, pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if len(foo.allocs) != 1 || len(foo.prestarts) != 2 {
		t.Errorf("allocs %v prestarts %v", foo.allocs, foo.prestarts)
	}
	// A container without devices gets empty options.
	plain := container("plain", nil)
	if opts, err := m.ContainerOptions(ctx, pod, &plain); err != nil || opts == nil || len(opts.Envs) != 0 {
		t.Errorf("plain container: %+v, %v", opts, err)
	}
}

func TestSanitizeAllocatable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := newTestManager(t, ctx, Config{})
	ep := attach(m, "example.com/foo", &fakeClient{resource: "example.com/foo"}, nil)
	report(ctx, m, ep, map[string]bool{"d0": true, "d1": true})
	pod := newPod("p", nil, container("app", map[string]int{"example.com/foo": 2}))
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatalf("rejected: %+v", d)
	}
	zero := v1.ResourceList{"example.com/foo": resource.MustParse("0"), v1.ResourceCPU: resource.MustParse("4")}
	got := m.SanitizeAllocatable(pod, zero)
	if q := got["example.com/foo"]; q.Value() != 2 {
		t.Errorf("sanitized foo = %s, want 2", q.String())
	}
	if q := got[v1.ResourceCPU]; q.String() != "4" {
		t.Errorf("cpu = %s", q.String())
	}
	if q := zero["example.com/foo"]; q.Value() != 0 {
		t.Errorf("argument modified")
	}
	if other := newPod("q", nil); m.SanitizeAllocatable(other, zero)["example.com/foo"] != zero["example.com/foo"] {
		t.Errorf("a pod without devices sees a changed allocatable")
	}
}

func TestWrapOptions(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := newTestManager(t, ctx, Config{})
	ep := attach(m, "example.com/foo", &fakeClient{resource: "example.com/foo"}, nil)
	report(ctx, m, ep, map[string]bool{"d0": true})
	pod := newPod("p", nil, container("app", map[string]int{"example.com/foo": 1}))
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatalf("rejected: %+v", d)
	}
	next := func(context.Context, *v1.Pod, *v1.Container, []string) (*nodekit.ContainerOptions, error) {
		return &nodekit.ContainerOptions{Envs: []nodekit.EnvVar{{Name: "A", Value: "1"}}, CPUSet: "0-1"}, nil
	}
	o, err := m.WrapOptions(next)(ctx, pod, &pod.Spec.Containers[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%v %s", o.Envs, o.CPUSet); got != "[{EXAMPLE_COM_FOO d0} {A 1}] 0-1" {
		t.Errorf("wrapped options = %s", got)
	}
}

// CDI device names of the plugins' answers reach the container options
// (and the wrapped options), each once; on a node whose runtime cannot
// inject them (Config.NoCDI) the container's options are an error naming
// the devices and the reason, not options without them.
func TestContainerOptionsCDI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, noCDI := range []string{"", "containerd 1.6.20 has no CDI device injection"} {
		m := newTestManager(t, ctx, Config{NoCDI: noCDI})
		ep := attach(m, "example.com/foo", &fakeClient{resource: "example.com/foo", cdi: true}, nil)
		report(ctx, m, ep, map[string]bool{"d0": true, "d1": true})
		ep = attach(m, "example.com/bar", &fakeClient{resource: "example.com/bar"}, nil)
		report(ctx, m, ep, map[string]bool{"b0": true})
		pod := newPod("p", nil, container("app", map[string]int{"example.com/foo": 2, "example.com/bar": 1}))
		if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod}); !d.Admit {
			t.Fatalf("rejected: %+v", d)
		}
		next := func(context.Context, *v1.Pod, *v1.Container, []string) (*nodekit.ContainerOptions, error) {
			return &nodekit.ContainerOptions{CDIDevices: []string{"dra.example.com/gpu=g0"}}, nil
		}
		o, err := m.WrapOptions(next)(ctx, pod, &pod.Spec.Containers[0], nil)
		if noCDI != "" {
			if err == nil || !strings.Contains(err.Error(), noCDI) || !strings.Contains(err.Error(), "example.com/foo=d0") {
				t.Errorf("NoCDI: options %+v, error %v; want an error naming the devices and the reason", o, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(o.CDIDevices, ","); got != "example.com/foo=d0,example.com/foo=d1,dra.example.com/gpu=g0" {
			t.Errorf("CDI devices = %s", got)
		}
	}
}

func TestContainerAndAllocatableDevices(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	active := &podSet{}
	m := newTestManager(t, ctx, Config{ActivePods: active.list})
	foo := &fakeClient{resource: "example.com/foo"}
	ep := attach(m, "example.com/foo", foo, nil)
	report(ctx, m, ep, map[string]bool{"f0": true, "f1": true, "f2": false})
	pod := newPod("p", nil, container("app", map[string]int{"example.com/foo": 1}))
	active.add(pod)
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatal(d)
	}
	got := m.ContainerDevices(pod.UID, "app")
	if len(got) != 1 || len(got["example.com/foo"]) != 1 {
		t.Fatalf("container devices %v, want one example.com/foo", got)
	}
	for id, d := range got["example.com/foo"] {
		if (id != "f0" && id != "f1") || d.ID != id || d.Topology != nil {
			t.Errorf("device %s = %v, want a healthy one without topology", id, d)
		}
	}
	if got := m.ContainerDevices(pod.UID, "other"); got != nil {
		t.Errorf("a container without devices: %v", got)
	}
	alloc := m.AllocatableDevices()
	if ids := sets.KeySet(alloc["example.com/foo"]); !ids.Equal(sets.New("f0", "f1")) {
		t.Errorf("allocatable %v, want the healthy f0 and f1", sets.List(ids))
	}
}
