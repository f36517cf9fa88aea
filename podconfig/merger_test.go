package podconfig

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
)

// testContext is t.Context() with a logger that writes to t.
func testContext(t testing.TB) context.Context {
	logger, _ := ktesting.NewTestContext(t)
	return klog.NewContext(t.Context(), logger)
}

var testStart = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

// testPod builds a pod; mods adjust it.
func testPod(uid, name string, mods ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name, Namespace: "default"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox"}}},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func withLabel(k, v string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[k] = v
	}
}

func withAnnotation(k, v string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func withPhase(ph v1.PodPhase) func(*v1.Pod) { return func(p *v1.Pod) { p.Status.Phase = ph } }

func withImage(img string) func(*v1.Pod) { return func(p *v1.Pod) { p.Spec.Containers[0].Image = img } }

func withDeletion(grace int64) func(*v1.Pod) {
	return func(p *v1.Pod) {
		p.DeletionTimestamp = &metav1.Time{Time: testStart.Add(time.Minute)}
		p.DeletionGracePeriodSeconds = ptr.To(grace)
	}
}

func withIP(ip string) func(*v1.Pod) { return func(p *v1.Pod) { p.Status.PodIP = ip } }

func inNamespace(ns string) func(*v1.Pod) { return func(p *v1.Pod) { p.Namespace = ns } }

func set(source string, pods ...*v1.Pod) nodekit.PodUpdate {
	return nodekit.PodUpdate{Op: nodekit.SET, Source: source, Pods: pods}
}

func op(o nodekit.Op, source string, pods ...*v1.Pod) nodekit.PodUpdate {
	return nodekit.PodUpdate{Op: o, Source: source, Pods: pods}
}

// summary renders updates as "OP source: uid,uid" lines.
func summary(updates []nodekit.PodUpdate) []string {
	var out []string
	for _, u := range updates {
		uids := make([]string, len(u.Pods))
		for i, p := range u.Pods {
			uids[i] = string(p.UID)
		}
		out = append(out, fmt.Sprintf("%s %s: %s", u.Op, u.Source, strings.Join(uids, ",")))
	}
	return out
}

type fakeRecorder struct {
	mu     sync.Mutex
	events []string
}

func (r *fakeRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pod := obj.(*v1.Pod)
	r.events = append(r.events, fmt.Sprintf("%s %s %s: %s", eventtype, reason, pod.UID, fmt.Sprintf(messageFmt, args...)))
}

func (r *fakeRecorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

var _ EventRecorder = (*fakeRecorder)(nil)

func namedSources(names ...string) []nodekit.Source {
	var out []nodekit.Source
	for _, n := range names {
		out = append(out, nodekit.SourceFunc{SourceName: n, Func: func(ctx context.Context, _ chan<- nodekit.PodUpdate) error {
			<-ctx.Done()
			return ctx.Err()
		}})
	}
	return out
}

func TestMerge(t *testing.T) {
	type step struct {
		in         nodekit.PodUpdate
		want       []string
		wantEvents int // events recorded by this step
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"first empty SET says the source is ready", []step{
			{in: set("api"), want: []string{"ADD api: "}},
			{in: set("api")},
		}},
		{"first SET adds, same SET again is quiet", []step{
			{in: set("api", testPod("1", "a"), testPod("2", "b")), want: []string{"ADD api: 1,2"}},
			{in: set("api", testPod("1", "a"), testPod("2", "b"))},
		}},
		{"label change is an UPDATE", []step{
			{in: set("api", testPod("1", "a")), want: []string{"ADD api: 1"}},
			{in: set("api", testPod("1", "a", withLabel("x", "y"))), want: []string{"UPDATE api: 1"}},
		}},
		{"spec change is an UPDATE", []step{
			{in: set("api", testPod("1", "a")), want: []string{"ADD api: 1"}},
			{in: set("api", testPod("1", "a", withImage("busybox:2"))), want: []string{"UPDATE api: 1"}},
		}},
		{"annotation change is an UPDATE, local annotations are not", []step{
			{in: set("api", testPod("1", "a")), want: []string{"ADD api: 1"}},
			{in: set("api", testPod("1", "a", withAnnotation(ConfigSeenAnnotation, "later"), withAnnotation(ConfigSourceAnnotation, "x")))},
			{in: set("api", testPod("1", "a", withAnnotation("team", "blue"))), want: []string{"UPDATE api: 1"}},
		}},
		{"status-only change is a RECONCILE", []step{
			{in: set("api", testPod("1", "a")), want: []string{"ADD api: 1"}},
			{in: set("api", testPod("1", "a", withPhase(v1.PodRunning))), want: []string{"RECONCILE api: 1"}},
			{in: set("api", testPod("1", "a", withPhase(v1.PodRunning)))},
		}},
		{"spec and status change together is one UPDATE", []step{
			{in: set("api", testPod("1", "a")), want: []string{"ADD api: 1"}},
			{in: set("api", testPod("1", "a", withLabel("x", "y"), withPhase(v1.PodRunning))), want: []string{"UPDATE api: 1"}},
		}},
		{"deletionTimestamp is a DELETE, status during deletion a RECONCILE, shorter grace a DELETE", []step{
			{in: set("api", testPod("1", "a")), want: []string{"ADD api: 1"}},
			{in: set("api", testPod("1", "a", withDeletion(30))), want: []string{"DELETE api: 1"}},
			{in: set("api", testPod("1", "a", withDeletion(30)))},
			{in: set("api", testPod("1", "a", withDeletion(30), withPhase(v1.PodSucceeded))), want: []string{"RECONCILE api: 1"}},
			{in: set("api", testPod("1", "a", withDeletion(0), withPhase(v1.PodSucceeded))), want: []string{"DELETE api: 1"}},
		}},
		{"pod gone from SET is a REMOVE", []step{
			{in: set("api", testPod("1", "a"), testPod("2", "b")), want: []string{"ADD api: 1,2"}},
			{in: set("api", testPod("2", "b")), want: []string{"REMOVE api: 1"}},
			{in: set("api"), want: []string{"REMOVE api: 2"}},
		}},
		{"one SET with every kind of change, in upstream order", []step{
			{in: set("api", testPod("1", "gone"), testPod("2", "relabeled"), testPod("3", "deleted"), testPod("4", "status"), testPod("5", "same")),
				want: []string{"ADD api: 1,2,3,4,5"}},
			{in: set("api", testPod("6", "new"), testPod("4", "status", withPhase(v1.PodRunning)), testPod("3", "deleted", withDeletion(30)),
				testPod("2", "relabeled", withLabel("x", "y")), testPod("5", "same")),
				want: []string{"REMOVE api: 1", "ADD api: 6", "UPDATE api: 2", "DELETE api: 3", "RECONCILE api: 4"}},
		}},
		{"removed pods come out sorted", []step{
			{in: set("api", testPod("1", "c"), testPod("2", "a"), testPod("3", "b", inNamespace("kube-system"))), want: []string{"ADD api: 1,2,3"}},
			{in: set("api"), want: []string{"REMOVE api: 2,1,3"}},
		}},
		{"increments", []step{
			{in: op(nodekit.ADD, "custom", testPod("1", "a")), want: []string{"ADD custom: 1"}},
			{in: op(nodekit.ADD, "custom", testPod("2", "b")), want: []string{"ADD custom: 2"}},
			{in: op(nodekit.UPDATE, "custom", testPod("1", "a", withLabel("x", "y"))), want: []string{"UPDATE custom: 1"}},
			{in: op(nodekit.UPDATE, "custom", testPod("2", "b", withPhase(v1.PodRunning))), want: []string{"RECONCILE custom: 2"}},
			{in: op(nodekit.DELETE, "custom", testPod("1", "a", withLabel("x", "y"), withDeletion(30))), want: []string{"DELETE custom: 1"}},
			{in: op(nodekit.REMOVE, "custom", testPod("1", "a")), want: []string{"REMOVE custom: 1"}},
			{in: op(nodekit.REMOVE, "custom", testPod("9", "unknown"))},
			{in: set("custom", testPod("2", "b", withPhase(v1.PodRunning))), want: []string{"ADD custom: "}},
		}},
		{"unknown op and missing source are ignored", []step{
			{in: op(nodekit.Op(42), "api", testPod("1", "a"))},
			{in: op(nodekit.SET, "", testPod("1", "a"))},
			{in: set("api", testPod("1", "a")), want: []string{"ADD api: 1"}},
		}},
		{"bad pods in an update are dropped", []step{
			{in: set("api", nil, testPod("", "no-uid"), testPod("1", ""), testPod("2", "a"), testPod("3", "a"), testPod("2", "other")),
				want: []string{"ADD api: 2"}, wantEvents: 2},
		}},
		{"same name from two sources: first wins, the other waits", []step{
			{in: set("api", testPod("1", "x")), want: []string{"ADD api: 1"}},
			{in: set("file", testPod("f1", "x"), testPod("f2", "y")), want: []string{"ADD file: f2"}, wantEvents: 1},
			{in: set("file", testPod("f1", "x"), testPod("f2", "y"))}, // reported once
			{in: set("api"), want: []string{"REMOVE api: 1", "ADD file: f1"}},
			{in: set("api", testPod("1", "x")), wantEvents: 1},
			{in: set("file", testPod("f2", "y")), want: []string{"REMOVE file: f1", "ADD api: 1"}},
			{in: set("api", testPod("1", "x"))},
		}},
		{"a dropped duplicate that its source no longer lists is not added", []step{
			{in: set("api", testPod("1", "x")), want: []string{"ADD api: 1"}},
			{in: set("file", testPod("f1", "x")), want: []string{"ADD file: "}, wantEvents: 1},
			{in: set("file")},
			{in: set("api"), want: []string{"REMOVE api: 1"}},
		}},
		{"the earliest dropped duplicate gets the name", []step{
			{in: set("api", testPod("1", "x")), want: []string{"ADD api: 1"}},
			{in: set("http", testPod("h1", "x")), want: []string{"ADD http: "}, wantEvents: 1},
			{in: set("file", testPod("f1", "x")), want: []string{"ADD file: "}, wantEvents: 1},
			{in: op(nodekit.REMOVE, "api", testPod("1", "x")), want: []string{"REMOVE api: 1", "ADD http: h1"}},
		}},
		{"a mirror pod shares its static pod's name", []step{
			{in: set("file", testPod("f1", "web-node")), want: []string{"ADD file: f1"}},
			{in: set("api", testPod("m1", "web-node", withAnnotation(ConfigMirrorAnnotation, "f1"))), want: []string{"ADD api: m1"}},
			{in: set("api"), want: []string{"REMOVE api: m1"}},
			{in: set("file", testPod("f1", "web-node"))},
		}},
		{"a new UID under a known name from the same source replaces it", []step{
			{in: set("api", testPod("1", "x")), want: []string{"ADD api: 1"}},
			{in: set("api", testPod("2", "x")), want: []string{"REMOVE api: 1", "ADD api: 2"}},
			{in: set("file", testPod("f", "x")), want: []string{"ADD file: "}, wantEvents: 1},
		}},
		{"nil and empty labels are the same", []step{
			{in: set("api", testPod("1", "a")), want: []string{"ADD api: 1"}},
			{in: set("api", testPod("1", "a", func(p *v1.Pod) { p.Labels = map[string]string{} }))},
		}},
	}
	for _, tc := range cases {
		for _, shared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shared=%v", tc.name, shared), func(t *testing.T) {
				ctx := testContext(t)
				rec := &fakeRecorder{}
				opts := []Option{WithClock(clocktesting.NewFakePassiveClock(testStart)), WithRecorder(rec)}
				if shared {
					opts = append(opts, WithSharedPods())
				}
				m := New(nil, opts...)
				events := 0
				for i, s := range tc.steps {
					got := summary(m.Merge(ctx, s.in))
					if !slices.Equal(got, s.want) {
						t.Errorf("step %d (%s %s): got %q, want %q", i, s.in.Op, s.in.Source, got, s.want)
					}
					all := rec.list()
					if n := len(all) - events; n != s.wantEvents {
						t.Errorf("step %d: %d events %q, want %d", i, n, all[events:], s.wantEvents)
					}
					events = len(all)
				}
			})
		}
	}
}

// TestSharedPodsStayAsHandedOut: with WithSharedPods the merger hands out
// the pods it keeps, and a later version of a pod (new status, spec,
// resourceVersion, deletion) is a new object: what was handed out before
// stays as it was.
func TestSharedPodsStayAsHandedOut(t *testing.T) {
	ctx := testContext(t)
	m := New(nil, WithClock(clocktesting.NewFakePassiveClock(testStart)), WithSharedPods())
	version := func(rv string, mods ...func(*v1.Pod)) *v1.Pod {
		p := testPod("1", "a", append([]func(*v1.Pod){withAnnotation("team", "blue")}, mods...)...)
		p.ResourceVersion = rv
		return p
	}
	var handed, snapshots []*v1.Pod
	steps := []struct {
		in   *v1.Pod
		want string
	}{
		{version("1"), "ADD api: 1"},
		{version("2", withPhase(v1.PodRunning)), "RECONCILE api: 1"},
		{version("3", withPhase(v1.PodRunning), withIP("10.0.0.3")), "RECONCILE api: 1"},
		{version("4", withPhase(v1.PodRunning), withIP("10.0.0.3")), ""}, // the resourceVersion alone
		{version("5", withPhase(v1.PodRunning), withIP("10.0.0.3"), withImage("busybox:2")), "UPDATE api: 1"},
		{version("6", withPhase(v1.PodRunning), withIP("10.0.0.3"), withImage("busybox:3")), "UPDATE api: 1"},
		{version("7", withPhase(v1.PodRunning), withIP("10.0.0.3"), withImage("busybox:3"), withDeletion(30)), "DELETE api: 1"},
	}
	for i, s := range steps {
		out := m.Merge(ctx, op(nodekit.UPDATE, "api", s.in))
		var got []string
		if s.want != "" {
			got = []string{s.want}
		}
		if sum := summary(out); !slices.Equal(sum, got) {
			t.Fatalf("step %d: %q, want %q", i, sum, got)
		}
		for j, p := range handed {
			if !equality.Semantic.DeepEqual(p, snapshots[j]) {
				t.Errorf("step %d: the pod handed out at step %d changed: resourceVersion %s, phase %s, image %s",
					i, j, p.ResourceVersion, p.Status.Phase, p.Spec.Containers[0].Image)
			}
		}
		kept := m.state["api"].pods["1"]
		if kept.ResourceVersion != s.in.ResourceVersion {
			t.Errorf("step %d: the merger holds resourceVersion %s, want %s", i, kept.ResourceVersion, s.in.ResourceVersion)
		}
		if len(out) > 0 {
			if out[0].Pods[0] != kept {
				t.Errorf("step %d: the pod handed out is not the merger's own object", i)
			}
			handed = append(handed, out[0].Pods[0])
			snapshots = append(snapshots, out[0].Pods[0].DeepCopy())
		}
	}
	if got := handed[len(handed)-1].Annotations[ConfigSeenAnnotation]; got != testStart.Format(seenTimeLayout) {
		t.Errorf("the last version's config.seen = %q, want the first sighting's", got)
	}
}

func TestMergeKeepsTheExistingObject(t *testing.T) {
	ctx := testContext(t)
	m := New(nil, WithClock(clocktesting.NewFakePassiveClock(testStart)))
	first := testPod("1", "a", withAnnotation("team", "blue"))
	first.ResourceVersion = "10"
	first.GenerateName = "kept-"
	out := m.Merge(ctx, set("api", first))
	added := out[0].Pods[0]
	if got := added.Annotations[ConfigSourceAnnotation]; got != "api" {
		t.Errorf("config.source = %q, want api", got)
	}
	seen := added.Annotations[ConfigSeenAnnotation]
	if want := testStart.Format(seenTimeLayout); seen != want {
		t.Errorf("config.seen = %q, want %q", seen, want)
	}
	// The caller owns what it got: changing it changes nothing in the merger.
	added.Labels = map[string]string{"mutated": "yes"}
	if got := m.Merge(ctx, set("api", testPod("1", "a", withAnnotation("team", "blue")))); len(got) != 0 {
		t.Errorf("after mutating a returned pod: %q, want nothing", summary(got))
	}

	second := testPod("1", "a", withAnnotation("team", "red"), withLabel("x", "y"))
	second.ResourceVersion = "11"
	out = m.Merge(ctx, set("api", second))
	if s := summary(out); !slices.Equal(s, []string{"UPDATE api: 1"}) {
		t.Fatalf("got %q, want UPDATE", s)
	}
	updated := out[0].Pods[0]
	if updated.Annotations[ConfigSeenAnnotation] != seen || updated.Annotations["team"] != "red" || updated.Labels["x"] != "y" {
		t.Errorf("updated annotations %v labels %v: want config.seen kept, team=red, x=y", updated.Annotations, updated.Labels)
	}
	if updated.GenerateName != "kept-" {
		t.Errorf("generateName = %q, want kept-: the existing object is kept and only the fields that matter are copied", updated.GenerateName)
	}
	if updated.ResourceVersion != "11" {
		t.Errorf("resourceVersion = %s, want 11: it names the version whose status the pod carries", updated.ResourceVersion)
	}
}

func TestSeenAllSources(t *testing.T) {
	ctx := testContext(t)
	m := New(namedSources("api", "file"))
	if m.SeenAllSources() {
		t.Fatal("SeenAllSources before any update")
	}
	m.Merge(ctx, op(nodekit.ADD, "api", testPod("1", "a")))
	m.Merge(ctx, set("file"))
	if m.SeenAllSources() {
		t.Fatal("SeenAllSources after an ADD from api: only a SET counts")
	}
	m.Merge(ctx, set("api"))
	if !m.SeenAllSources() {
		t.Fatal("not SeenAllSources after a SET from each")
	}
}

// TestMergeLeavesTheSourcesPodsAlone: Merge annotates its own copies; the
// pods of an update stay as the source sent them (the checkpoint source
// keeps them), for new, known and shadowed pods alike.
func TestMergeLeavesTheSourcesPodsAlone(t *testing.T) {
	ctx := testContext(t)
	m := New(nil, WithClock(clocktesting.NewFakePassiveClock(testStart)), WithSharedPods())
	bare := testPod("1", "a")
	annotated := testPod("2", "b", withAnnotation("team", "blue"))
	newer := testPod("2", "b", withAnnotation("team", "red"))
	shadowed := testPod("3", "a") // file's pod with api's name
	var sent, snapshots []*v1.Pod
	for _, u := range []nodekit.PodUpdate{op(nodekit.ADD, "api", bare, annotated), op(nodekit.UPDATE, "api", newer), set("file", shadowed)} {
		for _, p := range u.Pods {
			sent = append(sent, p)
			snapshots = append(snapshots, p.DeepCopy())
		}
		for _, out := range m.Merge(ctx, u) {
			for _, p := range out.Pods {
				if p.Annotations[ConfigSourceAnnotation] != out.Source {
					t.Errorf("emitted pod %s: config.source %q, want %q", p.Name, p.Annotations[ConfigSourceAnnotation], out.Source)
				}
			}
		}
	}
	for i, p := range sent {
		if !reflect.DeepEqual(p, snapshots[i]) {
			t.Errorf("the source's pod %s/%s changed: annotations %v, want %v", p.Name, p.UID, p.Annotations, snapshots[i].Annotations)
		}
	}
	// The shadowed pod gets the name when api's pod goes, as its own copy.
	out := m.Merge(ctx, op(nodekit.REMOVE, "api", bare))
	if s := summary(out); !slices.Equal(s, []string{"REMOVE api: 1", "ADD file: 3"}) {
		t.Fatalf("after api's pod went: %q", s)
	}
	if shadowed.Annotations != nil {
		t.Errorf("the promoted pod's source object was annotated: %v", shadowed.Annotations)
	}
}
