package criruntime_test

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/criruntime"
)

// The runtime carries out the actions it is given and reports typed
// failures; here over the CRI fakes (criruntime.New takes a real socket).
func Example() {
	ctx := context.Background()
	rs, is := critest.NewFakeRuntimeService(), critest.NewFakeImageService()
	is.SetFakeImages([]string{"busybox:1.36"})
	rt, err := criruntime.NewFromServices(ctx, rs, is, criruntime.Config{Endpoint: "fake"})
	if err != nil {
		panic(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec: v1.PodSpec{Containers: []v1.Container{
			{Name: "app", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent},
			{Name: "sidecar", Image: "missing:1", ImagePullPolicy: v1.PullNever},
		}},
	}
	res := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0, 1}}})
	for _, r := range res.Results {
		fmt.Println(r.Action, r.Target, r.Err == nil)
	}
	fmt.Println(errors.Is(res.Err(), nodekit.ErrImageNeverPull), res.Failure("sidecar").Message)
	// Output:
	// CreatePodSandbox web true
	// StartContainer app true
	// StartContainer sidecar false
	// true Container image "missing:1" is not present with pull policy of Never
}
