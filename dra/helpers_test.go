package dra

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

const testDriver = "test.nodekit.io"

// fakeDriver is a DRA driver serving the v1 gRPC API on a unix socket; it
// records every call and gives each claim one device per request with
// the CDI ID test.nodekit.io/dev=<claim name>-<request>.
type fakeDriver struct {
	drapb.UnimplementedDRAPluginServer
	mu        sync.Mutex
	prepared  []string // claim names, one per NodePrepareResources claim
	released  []string
	requests  map[string][]string // claim name -> request names
	endpoint  string
	failClaim string
}

func startDriver(t *testing.T) *fakeDriver { t.Helper(); return startDriverWith(t, nil) }

// startDriverWith is startDriver with more services registered on the
// driver's server by extra.
func startDriverWith(t *testing.T, extra func(*grpc.Server)) *fakeDriver {
	t.Helper()
	dir, err := os.MkdirTemp("", "dra") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &fakeDriver{endpoint: filepath.Join(dir, "dra.sock"), requests: map[string][]string{}}
	l, err := net.Listen("unix", d.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	drapb.RegisterDRAPluginServer(s, d)
	if extra != nil {
		extra(s)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return d
}

func (d *fakeDriver) NodePrepareResources(_ context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		d.prepared = append(d.prepared, c.Name)
		if c.Name == d.failClaim {
			resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Error: "broken device"}
			continue
		}
		r := &drapb.NodePrepareResourceResponse{}
		for _, req := range d.requests[c.Name] {
			r.Devices = append(r.Devices, &drapb.Device{RequestNames: []string{req}, PoolName: "pool", DeviceName: c.Name + "-" + req,
				CdiDeviceIds: []string{fmt.Sprintf("%s/dev=%s-%s", testDriver, c.Name, req)}})
		}
		resp.Claims[c.Uid] = r
	}
	return resp, nil
}

func (d *fakeDriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		d.released = append(d.released, c.Name)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}

func (d *fakeDriver) calls() (prepared, released []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.prepared...), append([]string(nil), d.released...)
}

// claims is a ClaimGetter over a map.
type claims struct {
	mu sync.Mutex
	m  map[string]*resourceapi.ResourceClaim
}

func (c *claims) GetResourceClaim(_ context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.m[ns+"/"+name]; cl != nil {
		return cl.DeepCopy(), nil
	}
	return nil, fmt.Errorf("resourceclaims %q not found", name)
}

func (c *claims) add(cl *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*resourceapi.ResourceClaim{}
	}
	c.m[cl.Namespace+"/"+cl.Name] = cl
}

// allocated is a claim named name allocated by testDriver with one
// result per request and reserved for pods.
func allocated(name string, requests []string, pods ...*v1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, r := range requests {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: r, Driver: testDriver, Pool: "pool", Device: name + "-" + r})
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

// podWith is a pod using the existing claims by name; its container
// "c" uses every claim, with the given request ("" is all).
func podWith(name string, request string, claimNames ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	c := v1.Container{Name: "c"}
	for _, n := range claimNames {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: "pc-" + n, ResourceClaimName: &n})
		c.Resources.Claims = append(c.Resources.Claims, v1.ResourceClaim{Name: "pc-" + n, Request: request})
	}
	p.Spec.Containers = []v1.Container{c}
	return p
}

func newManager(t *testing.T, root string, cl *claims, d *fakeDriver) *Manager {
	t.Helper()
	m, err := New(Config{RootDir: root, Claims: cl})
	if err != nil {
		t.Fatal(err)
	}
	if d != nil {
		if err := m.RegisterPlugin(t.Context(), testDriver, d.endpoint, []string{drapb.DRAPluginService}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(m.closeDrivers)
	return m
}
