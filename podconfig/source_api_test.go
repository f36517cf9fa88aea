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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

func boundPod(name, node string) *v1.Pod {
	p := testPod("uid-"+name, name)
	p.Spec.NodeName = node
	return p
}

// The first list is a SET; each watch event after it is an increment of
// the one pod it concerns.
func TestAPISourceFake(t *testing.T) {
	ctx := testContext(t)
	client := fake.NewClientset(boundPod("mine", "node-a"), boundPod("theirs", "node-b"))
	out := runSource(t, NewAPISource(clientgo.Wrap(client), "node-a"))

	u := recv(t, out, "the first SET")
	if u.Op != nodekit.SET || u.Source != nodekit.SourceAPI || !slices.Equal(podNames(u.Pods), []string{"default/mine"}) {
		t.Fatalf("first update = %s %s %q, want SET api [default/mine]", u.Op, u.Source, podNames(u.Pods))
	}
	expect := func(what string, op nodekit.Op, names ...string) nodekit.PodUpdate {
		t.Helper()
		u := recv(t, out, what)
		if u.Op != op || u.Source != nodekit.SourceAPI || !slices.Equal(podNames(u.Pods), names) {
			t.Fatalf("%s: got %s %s %q, want %s api %q", what, u.Op, u.Source, podNames(u.Pods), op, names)
		}
		return u
	}

	pods := client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, boundPod("also-mine", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("the ADD after a create", nodekit.ADD, "default/also-mine")
	if _, err := pods.Create(ctx, boundPod("elsewhere", "node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labelled := boundPod("mine", "node-a")
	labelled.Labels = map[string]string{"tier": "gold"}
	if _, err := pods.Update(ctx, labelled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := expect("the UPDATE after a change (nothing of node-b's pod before it)", nodekit.UPDATE, "default/mine"); u.Pods[0].Labels["tier"] != "gold" {
		t.Errorf("updated pod labels %v, want tier=gold", u.Pods[0].Labels)
	}
	if err := pods.Delete(ctx, "mine", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("the REMOVE after a delete", nodekit.REMOVE, "default/mine")
}

// A watch that cannot be resumed (its resourceVersion expired, as after a
// long outage) makes the source list again, and that list is a SET, so the
// merger removes the pods deleted while no events came.
func TestAPISourceRelistRemovesPodsDeletedDuringOutage(t *testing.T) {
	ctx := testContext(t)
	client := fake.NewClientset(boundPod("stays", "node-a"), boundPod("goes", "node-a"))
	first := watch.NewFake()
	var mu sync.Mutex
	watches := 0
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		if watches++; watches == 1 {
			return true, first, nil // events of the first watch come from the test
		}
		return false, nil, nil
	})
	m := New(nil)
	out := runSource(t, NewAPISource(clientgo.Wrap(client), "node-a"))
	merge := func(what string) []string {
		t.Helper()
		u := recv(t, out, what)
		u.Source = nodekit.SourceAPI
		return summary(m.Merge(ctx, u))
	}
	if got := merge("the first SET"); !slices.Equal(got, []string{"ADD api: uid-goes,uid-stays"}) {
		t.Fatalf("first list merged to %q", got)
	}

	// The pod is deleted while the watch is down: no event reaches the
	// source. Then the watch ends as an expired one does.
	if err := client.Tracker().Delete(v1.SchemeGroupVersion.WithResource("pods"), "default", "goes"); err != nil {
		t.Fatal(err)
	}
	first.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	u := recv(t, out, "the SET of the re-list")
	if u.Op != nodekit.SET || !slices.Equal(podNames(u.Pods), []string{"default/stays"}) {
		t.Fatalf("after the expired watch: %s %q, want SET [default/stays]", u.Op, podNames(u.Pods))
	}
	u.Source = nodekit.SourceAPI
	if got := summary(m.Merge(ctx, u)); !slices.Equal(got, []string{"REMOVE api: uid-goes"}) {
		t.Errorf("re-list merged to %q, want [REMOVE api: uid-goes]", got)
	}
}

// storeDriver drives an apiStore as the reflector does and returns what it
// sent for each call.
type storeDriver struct {
	t     *testing.T
	store cache.ReflectorStore
	out   chan nodekit.PodUpdate
}

func newStoreDriver(t *testing.T) *storeDriver {
	out := make(chan nodekit.PodUpdate, 1)
	return &storeDriver{t: t, store: NewAPISource(nil, "node-a").newStore(testContext(t), out), out: out}
}

// call runs f on the store and returns the update it sent, "" for none.
func (d *storeDriver) call(f func(cache.ReflectorStore) error) string {
	d.t.Helper()
	if err := f(d.store); err != nil {
		d.t.Fatal(err)
	}
	select {
	case u := <-d.out:
		line := u.Op.String()
		for _, p := range u.Pods {
			line += " " + p.Name + "@" + p.ResourceVersion
		}
		return line
	default:
		return ""
	}
}

func versioned(name, rv string) *v1.Pod {
	p := boundPod(name, "node-a")
	p.ResourceVersion = rv
	return p
}

func TestAPIStoreIncrements(t *testing.T) {
	d := newStoreDriver(t)
	steps := []struct {
		name string
		call func(cache.ReflectorStore) error
		want string
	}{
		{"first list", func(s cache.ReflectorStore) error {
			return s.Replace([]any{versioned("b", "5"), versioned("a", "4"), boundPod("other", "node-b")}, "5")
		}, "SET a@4 b@5"},
		{"a newer version", func(s cache.ReflectorStore) error { return s.Update(versioned("a", "7")) }, "UPDATE a@7"},
		{"the same version again", func(s cache.ReflectorStore) error { return s.Update(versioned("a", "7")) }, ""},
		{"an older version after a newer one", func(s cache.ReflectorStore) error { return s.Update(versioned("a", "6")) }, ""},
		{"an older version as an Add", func(s cache.ReflectorStore) error { return s.Add(versioned("b", "3")) }, ""},
		{"a longer, so newer, version", func(s cache.ReflectorStore) error { return s.Update(versioned("a", "10")) }, "UPDATE a@10"},
		{"an Update of a pod never sent is an ADD", func(s cache.ReflectorStore) error { return s.Update(versioned("c", "11")) }, "ADD c@11"},
		{"an Add of a known pod is an UPDATE", func(s cache.ReflectorStore) error { return s.Add(versioned("c", "12")) }, "UPDATE c@12"},
		{"a Delete of a pod never sent", func(s cache.ReflectorStore) error { return s.Delete(versioned("d", "13")) }, ""},
		{"a pod of another node", func(s cache.ReflectorStore) error { return s.Add(boundPod("elsewhere", "node-b")) }, ""},
		{"a Delete", func(s cache.ReflectorStore) error { return s.Delete(versioned("b", "14")) }, "REMOVE b@14"},
		{"a Delete again", func(s cache.ReflectorStore) error { return s.Delete(versioned("b", "14")) }, ""},
		{"a Delete of a final state unknown", func(s cache.ReflectorStore) error {
			return s.Delete(cache.DeletedFinalStateUnknown{Key: "default/c", Obj: versioned("c", "12")})
		}, "REMOVE c@12"},
		{"opaque versions that differ", func(s cache.ReflectorStore) error { return s.Add(versioned("a", "x1")) }, "UPDATE a@x1"},
		{"the same opaque version", func(s cache.ReflectorStore) error { return s.Update(versioned("a", "x1")) }, ""},
		{"a re-list replaces what is known", func(s cache.ReflectorStore) error {
			return s.Replace([]any{versioned("b", "20")}, "20")
		}, "SET b@20"},
		{"a pod the re-list dropped comes back as an ADD", func(s cache.ReflectorStore) error { return s.Add(versioned("a", "21")) }, "ADD a@21"},
		{"the re-listed version again", func(s cache.ReflectorStore) error { return s.Update(versioned("b", "20")) }, ""},
		{"an empty re-list", func(s cache.ReflectorStore) error { return s.Replace(nil, "22") }, "SET"},
		{"resync sends nothing", func(s cache.ReflectorStore) error { return s.Resync() }, ""},
	}
	for _, st := range steps {
		if got := d.call(st.call); got != st.want {
			t.Errorf("%s: sent %q, want %q", st.name, got, st.want)
		}
	}
}

func TestAPIStoreDropsManagedFields(t *testing.T) {
	out := make(chan nodekit.PodUpdate, 1)
	store := NewAPISource(nil, "node-a").newStore(testContext(t), out)
	withFields := func(name, rv string) *v1.Pod {
		p := versioned(name, rv)
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}}
		return p
	}
	for _, call := range []func() error{
		func() error { return store.Replace([]any{withFields("a", "1")}, "1") },
		func() error { return store.Add(withFields("b", "2")) },
		func() error { return store.Update(withFields("b", "3")) },
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
		u := <-out
		for _, p := range u.Pods {
			if p.ManagedFields != nil {
				t.Errorf("%s of %s sent with managedFields %v", u.Op, p.Name, p.ManagedFields)
			}
		}
	}
}

func TestAPISourceRejectsBadConfig(t *testing.T) {
	if err := NewAPISource(clientgo.Wrap(fake.NewClientset()), "").Run(testContext(t), nil); err == nil {
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
	src := NewAPISource(clientgo.Wrap(client), "node-a", WithErrorHandler(onError))
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
