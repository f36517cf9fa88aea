package main

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/kubeletconfig"
	"github.com/nodekit/nodekit/statusmgr"
)

// TestDeclaredFeaturesSideBySide: kubelet v1.37.2 publishes the
// status.declaredFeatures statusmgr.DeclaredFeatures computes for the same
// gates, and fullagent publishes that list less notImplementedFeatures.
func TestDeclaredFeaturesSideBySide(t *testing.T) {
	client, agents := startSideBySide(t, agenttest.ContainerdVersion16)
	got := map[string][]string{}
	for _, a := range agents {
		list, err := registeredDeclaredFeatures(t.Context(), client, a.node)
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		got[a.name] = list
	}
	gates, err := kubeletconfig.NewGates(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := statusmgr.DeclaredFeatures(statusmgr.DeclaredFeaturesConfig{Gates: gates})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got["kubelet"], upstream) {
		t.Errorf("kubelet declares %v; statusmgr.DeclaredFeatures computes %v", got["kubelet"], upstream)
	}
	want := slices.DeleteFunc(slices.Clone(got["kubelet"]), func(f string) bool { return slices.Contains(notImplementedFeatures(), f) })
	if !slices.Equal(got["fullagent"], want) {
		t.Errorf("fullagent declares %v, want kubelet's %v less %v", got["fullagent"], got["kubelet"], notImplementedFeatures())
	}
	t.Logf("kubelet %v, fullagent %v", got["kubelet"], got["fullagent"])
}

// registeredDeclaredFeatures waits for the node to be registered with its
// nodeInfo and returns its status.declaredFeatures.
func registeredDeclaredFeatures(ctx context.Context, client kubernetes.Interface, node string) ([]string, error) {
	var list []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil || n.Status.NodeInfo.KubeletVersion == "" {
			return false, nil
		}
		list = n.Status.DeclaredFeatures
		return true, nil
	})
	return list, err
}
