package podresources

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// Each handled call counts in the total and its method's series, a Get of
// a missing pod as an error too, and a call the rate limit rejects in none.
func TestEndpointMetrics(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	s, err := New(Config{Pods: fakePods{testPod()}, Clock: clk, Burst: 4})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := s.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	list := func(ctx context.Context, _ any) (any, error) {
		return s.List(ctx, &api.ListPodResourcesRequest{})
	}
	for range 5 { // the burst of 4 passes, the fifth is rejected before List
		_, _ = s.Limit(t.Context(), nil, nil, list)
	}
	if _, err := s.Get(t.Context(), &api.GetPodResourcesRequest{PodName: "p", PodNamespace: "ns"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), &api.GetPodResourcesRequest{PodName: "gone", PodNamespace: "ns"}); err == nil {
		t.Fatal("Get of a missing pod succeeded")
	}
	if _, err := s.GetAllocatableResources(t.Context(), &api.AllocatableResourcesRequest{}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP kubelet_pod_resources_endpoint_errors_get [ALPHA] Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_errors_get counter
kubelet_pod_resources_endpoint_errors_get{server_api_version="v1"} 1
# HELP kubelet_pod_resources_endpoint_requests_get [ALPHA] Number of requests to the PodResource Get endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_get counter
kubelet_pod_resources_endpoint_requests_get{server_api_version="v1"} 2
# HELP kubelet_pod_resources_endpoint_requests_get_allocatable [ALPHA] Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_get_allocatable counter
kubelet_pod_resources_endpoint_requests_get_allocatable{server_api_version="v1"} 1
# HELP kubelet_pod_resources_endpoint_requests_list [ALPHA] Number of requests to the PodResource List endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_list counter
kubelet_pod_resources_endpoint_requests_list{server_api_version="v1"} 4
# HELP kubelet_pod_resources_endpoint_requests_total [ALPHA] Cumulative number of requests to the PodResource endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_total counter
kubelet_pod_resources_endpoint_requests_total{server_api_version="v1"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
