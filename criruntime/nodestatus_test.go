package criruntime

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
)

func TestSetNodeStatus(t *testing.T) {
	for _, tc := range []struct {
		name         string
		handlers     []*runtimeapi.RuntimeHandler
		features     *runtimeapi.RuntimeFeatures
		wantFeatures *v1.NodeFeatures
		wantHandlers []v1.NodeRuntimeHandler
	}{
		{name: "containerd 1.6: nothing reported, nothing published", wantHandlers: []v1.NodeRuntimeHandler{}},
		{name: "containerd 2 with runc 1.1",
			handlers: []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}},
				{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}}},
			features:     &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true, UserNamespacesHostNetwork: true},
			wantFeatures: &v1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(true)},
			wantHandlers: []v1.NodeRuntimeHandler{
				{Name: "", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(true), UserNamespaces: ptr.To(false)}},
				{Name: "runc", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(true), UserNamespaces: ptr.To(false)}},
			}},
		{name: "features without supplemental groups policy",
			handlers:     []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}},
			features:     &runtimeapi.RuntimeFeatures{},
			wantFeatures: &v1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(false)},
			wantHandlers: []v1.NodeRuntimeHandler{
				{Name: "", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(false), UserNamespaces: ptr.To(true)}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, rs, _ := newFake(t)
			rs.handlers, rs.features = tc.handlers, tc.features
			node := &v1.Node{}
			if err := r.SetNodeStatus(t.Context(), node); err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(node.Status.Features, tc.wantFeatures) || !apiequality.Semantic.DeepEqual(node.Status.RuntimeHandlers, tc.wantHandlers) {
				t.Fatalf("features %+v handlers %+v, want %+v %+v", node.Status.Features, node.Status.RuntimeHandlers, tc.wantFeatures, tc.wantHandlers)
			}
			// The runtime stops answering: the node keeps what it had.
			rs.InjectError("Status", errors.New("down"))
			again := &v1.Node{}
			if err := r.SetNodeStatus(t.Context(), again); err == nil {
				t.Fatal("no error while the runtime is down")
			}
			if !apiequality.Semantic.DeepEqual(again.Status, node.Status) {
				t.Fatalf("while down %+v, want the last known %+v", again.Status, node.Status)
			}
		})
	}
}

func TestContainerStatusUser(t *testing.T) {
	r, rs, is := newFake(t)
	is.SetFakeImages([]string{"busybox:1.36"})
	rs.user = &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{Uid: 1000, Gid: 3000, SupplementalGroups: []int64{3000, 4000}}}
	pod := testPod(v1.Container{Name: "app", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent})
	if err := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
		t.Fatal(err)
	}
	st, err := r.GetPodStatus(t.Context(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	want := &v1.ContainerUser{Linux: &v1.LinuxContainerUser{UID: 1000, GID: 3000, SupplementalGroups: []int64{3000, 4000}}}
	if got := st.FindContainer("app").User; !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("user %+v, want %+v", got, want)
	}
}

// TestSupportsRecursiveReadOnly: a handler the runtime reports with the
// feature supports it (asked of the runtime once when no node status was
// set yet); an unknown handler, or a runtime reporting none, does not.
func TestSupportsRecursiveReadOnly(t *testing.T) {
	r, rs, _ := newFake(t)
	rs.handlers = []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}},
		{Name: "plain", Features: &runtimeapi.RuntimeHandlerFeatures{}}}
	for handler, want := range map[string]bool{"": true, "plain": false, "kata": false} {
		if got := r.SupportsRecursiveReadOnly(t.Context(), handler); got != want {
			t.Errorf("handler %q: %v, want %v", handler, got, want)
		}
	}
	old, _, _ := newFake(t) // containerd 1.6: no handlers
	if old.SupportsRecursiveReadOnly(t.Context(), "") {
		t.Error("a runtime reporting no handlers supports recursive read-only mounts")
	}
}
