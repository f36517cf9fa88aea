package main

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	podresourcesv1alpha1 "k8s.io/kubelet/pkg/apis/podresources/v1alpha1"

	"github.com/nodekit/nodekit/agenttest"
)

// TestPodResourcesAPI: with cpuManagerPolicy static (CPU 0 reserved) and a
// device plugin serving two example.com/foo devices, a Guaranteed pod
// holding one exclusive CPU and one device is listed through
// ROOT/pod-resources/kubelet.sock by upstream's generated client with
// that CPU and that device, Get finds it, and GetAllocatableResources
// reports the CPUs but the reserved one and both devices; the deprecated
// v1alpha1 List on the same socket reports the pod's device too.
func TestPodResourcesAPI(t *testing.T) {
	if runtime.NumCPU() < 2 {
		agenttest.RequireIntegration(t, "a machine of 2 CPUs", fmt.Errorf("the machine has %d", runtime.NumCPU()))
	}
	e := startEnv(t, envOption{config: "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"})
	startFooPlugin(t, e.rootDir)
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		q, ok := n.Status.Allocatable[fooResource]
		return ok && q.Value() == 2, nil
	})
	if err != nil {
		t.Fatalf("node allocatable %s never became 2", fooResource)
	}

	p := fooPod("guaranteed")
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("32Mi"), fooResource: resource.MustParse("1")}
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: res, Limits: res}
	e.createPod(t, p)
	e.waitPod(t, "guaranteed", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	socket := filepath.Join(e.rootDir, "pod-resources", "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	list, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	var got *podresourcesv1.PodResources
	for _, pr := range list.PodResources {
		if pr.Namespace == "default" && pr.Name == "guaranteed" {
			got = pr
		}
	}
	if got == nil || len(got.Containers) != 1 {
		t.Fatalf("List has no pod guaranteed with one container: %v", list)
	}
	c := got.Containers[0]
	if c.Name != "app" || len(c.CpuIds) != 1 || c.CpuIds[0] == 0 {
		t.Fatalf("container %v: want app with one exclusive CPU other than the reserved 0", c)
	}
	if len(c.Devices) != 1 || c.Devices[0].ResourceName != fooResource || len(c.Devices[0].DeviceIds) != 1 {
		t.Fatalf("container devices %v: want one %s", c.Devices, fooResource)
	}

	one, err := client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: "guaranteed", PodNamespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if gc := one.PodResources.Containers[0]; !slices.Equal(gc.CpuIds, c.CpuIds) || gc.Devices[0].DeviceIds[0] != c.Devices[0].DeviceIds[0] {
		t.Fatalf("Get = %v, List = %v", one.PodResources, got)
	}

	alloc, err := client.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var wantCPUs []int64
	for i := 1; i < runtime.NumCPU(); i++ {
		wantCPUs = append(wantCPUs, int64(i))
	}
	if !slices.Equal(alloc.CpuIds, wantCPUs) {
		t.Errorf("allocatable CPUs %v, want %v (all but the reserved 0)", alloc.CpuIds, wantCPUs)
	}
	var devs []string
	for _, d := range alloc.Devices {
		if d.ResourceName == fooResource {
			devs = append(devs, d.DeviceIds...)
		}
	}
	if len(devs) != 2 || !slices.Contains(devs, c.Devices[0].DeviceIds[0]) {
		t.Errorf("allocatable %s devices %v, want both, the pod's %s among them", fooResource, devs, c.Devices[0].DeviceIds[0])
	}

	// The deprecated v1alpha1 List, served beside v1 as upstream: the pod's
	// container with the same device.
	alpha, err := podresourcesv1alpha1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1alpha1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var alphaDevs []string
	for _, pr := range alpha.PodResources {
		if pr.Namespace == "default" && pr.Name == "guaranteed" && len(pr.Containers) == 1 && pr.Containers[0].Name == "app" {
			for _, d := range pr.Containers[0].Devices {
				alphaDevs = append(alphaDevs, d.DeviceIds...)
			}
		}
	}
	if !slices.Equal(alphaDevs, c.Devices[0].DeviceIds) {
		t.Errorf("v1alpha1 List devices of guaranteed/app = %v, want %v; list %v", alphaDevs, c.Devices[0].DeviceIds, alpha)
	}

	// The calls above counted in kubelet's endpoint series.
	m, err := e.scrape(ctx, "metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, series := range []string{"requests_list", "requests_get", "requests_get_allocatable"} {
		if v := m[`kubelet_pod_resources_endpoint_`+series+`{server_api_version="v1"}`]; v < 1 {
			t.Errorf("kubelet_pod_resources_endpoint_%s = %v, want at least 1", series, v)
		}
	}
	if v := m[`kubelet_pod_resources_endpoint_requests_total{server_api_version="v1"}`]; v < 3 {
		t.Errorf("kubelet_pod_resources_endpoint_requests_total = %v, want at least 3", v)
	}
	if v := m[`kubelet_pod_resources_endpoint_requests_total{server_api_version="v1alpha1"}`]; v != 1 {
		t.Errorf("kubelet_pod_resources_endpoint_requests_total{v1alpha1} = %v, want 1", v)
	}
}
