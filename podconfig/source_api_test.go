package podconfig

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodekit/nodekit"
)

func boundPod(name, node string) *v1.Pod {
	p := testPod("uid-"+name, name)
	p.Spec.NodeName = node
	return p
}

func TestAPISourceFake(t *testing.T) {
	ctx := testContext(t)
	client := fake.NewClientset(boundPod("mine", "node-a"), boundPod("theirs", "node-b"))
	out := runSource(t, NewAPISource(client, "node-a"))

	u := recv(t, out, "the first SET")
	if u.Op != nodekit.SET || u.Source != nodekit.SourceAPI || !slices.Equal(podNames(u.Pods), []string{"default/mine"}) {
		t.Fatalf("first update = %s %s %q, want SET api [default/mine]", u.Op, u.Source, podNames(u.Pods))
	}

	pods := client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, boundPod("also-mine", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := recv(t, out, "the SET after a create"); !slices.Equal(podNames(u.Pods), []string{"default/also-mine", "default/mine"}) {
		t.Fatalf("after a create: %q", podNames(u.Pods))
	}
	if err := pods.Delete(ctx, "mine", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := recv(t, out, "the SET after a delete"); !slices.Equal(podNames(u.Pods), []string{"default/also-mine"}) {
		t.Fatalf("after a delete: %q", podNames(u.Pods))
	}
}

func TestAPISourceRejectsBadConfig(t *testing.T) {
	if err := NewAPISource(fake.NewClientset(), "").Run(testContext(t), nil); err == nil {
		t.Error("Run without a node name = nil, want an error")
	}
	if err := NewAPISource(nil, "n").Run(testContext(t), nil); err == nil {
		t.Error("Run without a client = nil, want an error")
	}
}

// While the API server cannot be reached the source sends nothing (the
// last set stays in force) and reports the failures; once it can, the real
// set arrives.
func TestAPISourceOutage(t *testing.T) {
	client := fake.NewClientset(boundPod("mine", "node-a"))
	var mu sync.Mutex
	failures := 2
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	onError, errs := errorsTo()
	src := NewAPISource(client, "node-a", WithErrorHandler(onError))
	src.backoff = &wait.Backoff{Duration: time.Millisecond, Factor: 2, Cap: 10 * time.Millisecond, Steps: 100}
	out := runSource(t, src)

	if err := recv(t, errs, "the list failure"); !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "node-a") {
		t.Errorf("reported %v, want the list failure naming the node", err)
	}
	u := recv(t, out, "the first SET")
	if !slices.Equal(podNames(u.Pods), []string{"default/mine"}) {
		t.Fatalf("first SET after the outage = %q, want [default/mine]", podNames(u.Pods))
	}
}
