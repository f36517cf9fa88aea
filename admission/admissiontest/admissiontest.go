package admissiontest

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
)

// DefaultMaxPods is the "pods" allocatable a Node gets when it lists none,
// kubelet's default maxPods.
const DefaultMaxPods = 110

// Node describes a node and the pods already admitted on it. The zero Node
// is a node named "node" with no resources but room for 110 pods, labelled
// with this machine's OS and architecture.
type Node struct {
	// Name defaults to "node".
	Name string
	// Capacity is status.capacity.
	Capacity v1.ResourceList
	// Allocatable is status.allocatable; nil means Capacity. Without a
	// "pods" entry the node allows DefaultMaxPods.
	Allocatable v1.ResourceList
	// Labels are added to the defaults kubernetes.io/hostname (Name),
	// kubernetes.io/os (runtime.GOOS) and kubernetes.io/arch
	// (runtime.GOARCH), and override them.
	Labels map[string]string
	// Taints are spec.taints.
	Taints []v1.Taint
	// Pods are the pods already admitted. They are passed to the chain as
	// AdmitRequest.Pods and not modified.
	Pods []*v1.Pod
}

// Object returns the node as an API object, built afresh on each call.
func (n Node) Object() *v1.Node {
	name := n.Name
	if name == "" {
		name = "node"
	}
	labels := map[string]string{
		v1.LabelHostname:   name,
		v1.LabelOSStable:   runtime.GOOS,
		v1.LabelArchStable: runtime.GOARCH,
	}
	maps.Copy(labels, n.Labels)
	alloc := n.Allocatable
	if alloc == nil {
		alloc = n.Capacity
	}
	alloc = alloc.DeepCopy()
	if alloc == nil {
		alloc = v1.ResourceList{}
	}
	if _, ok := alloc[v1.ResourcePods]; !ok {
		alloc[v1.ResourcePods] = *resource.NewQuantity(DefaultMaxPods, resource.DecimalSI)
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       v1.NodeSpec{Taints: append([]v1.Taint(nil), n.Taints...)},
		Status: v1.NodeStatus{
			Capacity:    n.Capacity.DeepCopy(),
			Allocatable: alloc,
		},
	}
}

// Chain returns the chain an agent runs on this node, in
// admission.DefaultChain's order: admission.Builtins followed by custom, in
// order.
func (n Node) Chain(custom ...nodekit.Admitter) *admission.Chain {
	node := n.Object()
	return admission.NewChain(admission.DefaultChain(admission.ChainConfig{
		Node:   admission.NodeFunc(func(context.Context) (*v1.Node, error) { return node, nil }),
		Custom: custom,
	})...)
}

// Admit runs pod through Chain(custom...) with n.Pods as the admitted pods
// and returns the decision.
func (n Node) Admit(ctx context.Context, pod *v1.Pod, custom ...nodekit.Admitter) nodekit.Decision {
	return n.Chain(custom...).Admit(ctx, nodekit.AdmitRequest{Pod: pod, Pods: n.Pods})
}

// Resources parses a comma-separated list of name=quantity pairs, as in
// "cpu=500m,memory=1Gi,example.com/gpu=1". An empty string gives an empty
// list. Like resource.MustParse it panics on a malformed pair: it is meant
// for literals in tests.
func Resources(s string) v1.ResourceList {
	rl := v1.ResourceList{}
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		name, qty, ok := strings.Cut(pair, "=")
		if !ok || name == "" {
			panic(fmt.Sprintf("admissiontest.Resources: %q is not name=quantity", pair))
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(qty))
		if err != nil {
			panic(fmt.Sprintf("admissiontest.Resources: %q: %v", pair, err))
		}
		rl[v1.ResourceName(strings.TrimSpace(name))] = q
	}
	return rl
}

// Pod returns a pod in namespace "default" with UID "uid-<name>" and one
// container "app" requesting requests (which may be nil). Tests set other
// fields on the result directly.
func Pod(name string, requests v1.ResourceList) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{
				Name:      "app",
				Image:     "busybox",
				Resources: v1.ResourceRequirements{Requests: requests},
			}},
		},
	}
}
