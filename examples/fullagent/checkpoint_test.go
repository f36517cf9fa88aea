package main

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/statusmgr"
)

// featuresRuntime is a fake CRI runtime whose Status reports features, as
// containerd 2 does.
type featuresRuntime struct {
	*critest.FakeRuntimeService
	features *runtimeapi.RuntimeFeatures
}

func (r *featuresRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	st, err := r.FakeRuntimeService.Status(ctx, verbose)
	if err != nil {
		return nil, err
	}
	st.Features = r.features
	return st, nil
}

// Before the API server answers, admission judges pods by the node built
// locally; it must carry the runtime's features as upstream's initialNode
// does, or a Strict pod is refused on a runtime that supports it.
func TestLocalNodeCarriesRuntimeFeatures(t *testing.T) {
	machine := statusmgr.MachineInfoFunc(func(context.Context) (statusmgr.Machine, error) {
		return statusmgr.Machine{NumCores: 2, MemoryBytes: 1 << 30}, nil
	})
	strict := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyStrict)}}}
	for _, tc := range []struct {
		name     string
		features *runtimeapi.RuntimeFeatures
		want     nodekit.Decision
	}{
		{"runtime supports Strict (containerd 2)", &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true}, nodekit.Admitted},
		{"runtime reports no features (containerd 1.6)", nil,
			nodekit.Decision{Reason: "SupplementalGroupsPolicyNotSupported", Message: "SupplementalGroupsPolicy=Strict is not supported in this node"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := &featuresRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(), features: tc.features}
			rt, err := criruntime.NewFromServices(t.Context(), rs, critest.NewFakeImageService(), criruntime.Config{Endpoint: "fake", PodLogsDir: t.TempDir(), RootDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			a := &agent{nodeName: testNode, cfg: &kubeletv1beta1.KubeletConfiguration{MaxPods: 110}, runtime: rt}
			node, err := a.localNode(t.Context(), machine)
			if err != nil {
				t.Fatal(err)
			}
			got := admission.NewSupplementalGroupsPolicy(admission.NodeFunc(func(context.Context) (*v1.Node, error) { return node, nil })).
				Admit(t.Context(), nodekit.AdmitRequest{Pod: strict})
			if got != tc.want {
				t.Fatalf("Strict pod on the local node (features %+v): %+v, want %+v", node.Status.Features, got, tc.want)
			}
		})
	}
}
