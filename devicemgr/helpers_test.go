package devicemgr

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekit/nodekit"
)

// fakeClient is an in-process plugin: Allocate answers an environment
// variable with the device IDs; GetPreferredAllocation answers
// preferred(), which may name any device, free or not.
type fakeClient struct {
	pluginapi.DevicePluginClient // unused methods panic
	resource                     string
	mu                           sync.Mutex
	allocs                       [][]string
	preferred                    func(available, mustInclude []string, size int) []string
	prestarts                    [][]string
	cdi                          bool // answer a CDI device per device ID too
}

func (f *fakeClient) Allocate(_ context.Context, req *pluginapi.AllocateRequest, _ ...grpc.CallOption) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, r := range req.ContainerRequests {
		f.mu.Lock()
		f.allocs = append(f.allocs, slices.Clone(r.DevicesIds))
		f.mu.Unlock()
		cr := &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{envName(f.resource): strings.Join(r.DevicesIds, ",")},
		}
		for _, id := range r.DevicesIds {
			if f.cdi {
				cr.CdiDevices = append(cr.CdiDevices, &pluginapi.CDIDevice{Name: f.resource + "=" + id})
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (f *fakeClient) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest, _ ...grpc.CallOption) (*pluginapi.PreferredAllocationResponse, error) {
	r := req.ContainerRequests[0]
	var ids []string
	if f.preferred != nil {
		ids = f.preferred(r.AvailableDeviceIDs, r.MustIncludeDeviceIDs, int(r.AllocationSize))
	}
	return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: ids}}}, nil
}

func (f *fakeClient) PreStartContainer(_ context.Context, req *pluginapi.PreStartContainerRequest, _ ...grpc.CallOption) (*pluginapi.PreStartContainerResponse, error) {
	f.mu.Lock()
	f.prestarts = append(f.prestarts, slices.Clone(req.DevicesIds))
	f.mu.Unlock()
	return &pluginapi.PreStartContainerResponse{}, nil
}

func envName(resource string) string {
	return strings.ToUpper(strings.NewReplacer(".", "_", "/", "_").Replace(resource))
}

// attach connects an in-process plugin for resource, as a registration
// would, without a socket or a ListAndWatch stream.
func attach(m *Manager, resource string, client pluginapi.DevicePluginClient, opts *pluginapi.DevicePluginOptions) *endpoint {
	ep := &endpoint{resource: resource, socket: "/fake/" + resource, client: client, opts: opts}
	m.mu.Lock()
	rs := m.resourceFor(resource)
	rs.ep = ep
	rs.stopped = time.Time{}
	if rs.expiry != nil {
		rs.expiry.Stop()
	}
	m.mu.Unlock()
	return ep
}

// report sends a ListAndWatch answer: the devices with their health.
func report(ctx context.Context, m *Manager, ep *endpoint, health map[string]bool) {
	var devs []*pluginapi.Device
	for _, id := range sets.List(sets.KeySet(health)) {
		h := pluginapi.Unhealthy
		if health[id] {
			h = pluginapi.Healthy
		}
		devs = append(devs, &pluginapi.Device{ID: id, Health: h})
	}
	m.updateDevices(ctx, ep, devs)
}

// podSet is a concurrency-safe list of active pods.
type podSet struct {
	mu   sync.Mutex
	pods []*v1.Pod
}

func (s *podSet) list() []*v1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pods)
}

func (s *podSet) add(p *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = append(s.pods, p)
}

func (s *podSet) remove(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = slices.DeleteFunc(s.pods, func(p *v1.Pod) bool { return p.UID == uid })
}

// container returns a container asking for the given counts.
func container(name string, req map[string]int) v1.Container {
	c := v1.Container{Name: name}
	for res, n := range req {
		if c.Resources.Limits == nil {
			c.Resources.Limits = v1.ResourceList{}
			c.Resources.Requests = v1.ResourceList{}
		}
		q := resource.MustParse(fmt.Sprint(n))
		c.Resources.Limits[v1.ResourceName(res)] = q
		c.Resources.Requests[v1.ResourceName(res)] = q
	}
	return c
}

func newPod(uid string, init []v1.Container, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "default", UID: types.UID(uid)},
		Spec:       v1.PodSpec{InitContainers: init, Containers: containers},
	}
}

// held returns the devices of every container of every pod, by pod UID,
// container and resource.
func held(m *Manager) map[string]map[string]map[string]sets.Set[string] {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]map[string]map[string]sets.Set[string]{}
	for uid, cs := range m.pods {
		out[uid] = map[string]map[string]sets.Set[string]{}
		for c, rs := range cs {
			out[uid][c] = map[string]sets.Set[string]{}
			for r, a := range rs {
				out[uid][c][r] = a.ids()
			}
		}
	}
	return out
}

func newTestManager(t *testing.T, ctx context.Context, cfg Config) *Manager {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	m, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.noSync = true
	return m
}

type setOfStrings = sets.Set[string]

func fmtOptions(o *nodekit.ContainerOptions) string { return fmt.Sprintf("%+v", *o) }
