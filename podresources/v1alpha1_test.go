package podresources

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
)

type allPods []*v1.Pod

func (a allPods) Pods() []*v1.Pod { return a }

// TestV1alpha1List calls the deprecated v1alpha1 List through the socket
// with upstream's generated client: every pod AllPods gives (a terminated
// one too), only regular containers, only their device-plugin devices,
// and only the v1alpha1 total counted.
func TestV1alpha1List(t *testing.T) {
	d, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	running := testPod()
	done := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: "ns", UID: "u2"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}, Status: v1.PodStatus{Phase: v1.PodSucceeded}}
	f := &fakeResources{
		cpus: map[string][]int64{"u1/main": {2, 3}},
		devices: map[string][]*api.ContainerDevices{
			"u1/sidecar": {{ResourceName: "example.com/dev", DeviceIds: []string{"d0"}}},
			"u1/main":    {{ResourceName: "example.com/dev", DeviceIds: []string{"d1", "d2"}}},
		},
	}
	s, err := New(Config{Dir: filepath.Join(d, "pod-resources"), Pods: fakePods{running}, AllPods: allPods{running, done}, CPUs: f, Devices: f})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := s.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	ctx, conn := serveOnSocket(t, s)
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	resp, err := v1alpha1.NewPodResourcesListerClient(conn).List(cctx, &v1alpha1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	want := &v1alpha1.ListPodResourcesResponse{PodResources: []*v1alpha1.PodResources{
		{Name: "p", Namespace: "ns", Containers: []*v1alpha1.ContainerResources{
			{Name: "main", Devices: []*v1alpha1.ContainerDevices{{ResourceName: "example.com/dev", DeviceIds: []string{"d1", "d2"}}}}}},
		{Name: "done", Namespace: "ns", Containers: []*v1alpha1.ContainerResources{{Name: "c"}}},
	}}
	if !proto.Equal(resp, want) {
		t.Errorf("v1alpha1 List = %v\nwant %v", resp, want)
	}
	// v1 on the same socket still reports the active pods only.
	v1resp, err := api.NewPodResourcesListerClient(conn).List(cctx, &api.ListPodResourcesRequest{})
	if err != nil || len(v1resp.PodResources) != 1 {
		t.Errorf("v1 List = %v, %v; want the one active pod", v1resp, err)
	}
	expected := `
# HELP kubelet_pod_resources_endpoint_requests_total [ALPHA] Cumulative number of requests to the PodResource endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_total counter
kubelet_pod_resources_endpoint_requests_total{server_api_version="v1"} 1
kubelet_pod_resources_endpoint_requests_total{server_api_version="v1alpha1"} 1
# HELP kubelet_pod_resources_endpoint_requests_list [ALPHA] Number of requests to the PodResource List endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_list counter
kubelet_pod_resources_endpoint_requests_list{server_api_version="v1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "kubelet_pod_resources_endpoint_requests_total", "kubelet_pod_resources_endpoint_requests_list"); err != nil {
		t.Error(err)
	}
}
