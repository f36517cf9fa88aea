package kubeclient_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

// TestEventSinkWritesWhereClientGosDoes sends an event's create, update
// and patch through EventSink and through client-go's own sink, and
// wants the same method and URL for each.
func TestEventSinkWritesWhereClientGosDoes(t *testing.T) {
	rec, lean, cs := clientPair(t)
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "p.1", Namespace: "ns"}, Reason: "Pulled"}
	write := func(s record.EventSink) []request {
		t.Helper()
		if _, err := s.Create(ev); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ev); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Patch(ev, []byte(`{"count":2}`)); err != nil {
			t.Fatal(err)
		}
		reqs := rec.take()
		for i := range reqs {
			reqs[i].Accept, reqs[i].ContentType, reqs[i].Body = "", "", nil // client-go's sink sends JSON
		}
		return reqs
	}
	got := write(kubeclient.EventSink(t.Context(), lean))
	want := write(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	if len(got) != 3 || len(want) != 3 {
		t.Fatalf("requests %+v, want 3 like client-go's %+v", got, want)
	}
	for i := range want {
		if got[i].Method != want[i].Method || got[i].URL != want[i].URL {
			t.Errorf("request %d: %s %s, want client-go's %s %s", i, got[i].Method, got[i].URL, want[i].Method, want[i].URL)
		}
	}
}

// TestEventSinkOutlivesItsContext checks the events of a shutdown still go
// out after the agent's context is cancelled.
func TestEventSinkOutlivesItsContext(t *testing.T) {
	cs := fake.NewClientset()
	ctx, cancel := context.WithCancel(t.Context())
	s := kubeclient.EventSink(ctx, clientgo.Wrap(cs))
	cancel()
	if _, err := s.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "p.2", Namespace: "ns"}, Reason: "Killing"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Events("ns").Get(t.Context(), "p.2", metav1.GetOptions{}); err != nil {
		t.Errorf("event created after cancel not stored: %v", err)
	}
}

// optsRecorder is a resource that remembers the options it was asked with.
type optsRecorder struct{ list, watch []metav1.ListOptions }

func (o *optsRecorder) List(_ context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	o.list = append(o.list, opts)
	return &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}, nil
}

func (o *optsRecorder) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	o.watch = append(o.watch, opts)
	return watch.NewEmptyWatch(), nil
}

func TestListWatchTweaksEveryRequest(t *testing.T) {
	r := &optsRecorder{}
	lw := kubeclient.ListWatch(nil, r, func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=n" }).(cache.ListerWatcherWithContext)
	if _, err := lw.ListWithContext(t.Context(), metav1.ListOptions{ResourceVersion: "0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{ResourceVersion: "5"}); err != nil {
		t.Fatal(err)
	}
	if len(r.list) != 1 || r.list[0].FieldSelector != "metadata.name=n" || r.list[0].ResourceVersion != "0" ||
		len(r.watch) != 1 || r.watch[0].FieldSelector != "metadata.name=n" || r.watch[0].ResourceVersion != "5" {
		t.Errorf("lists %+v, watches %+v: want each with the tweak and its own resourceVersion", r.list, r.watch)
	}
}

// TestListWatchInformerOverAWrappedFake runs an informer on ListWatch over
// client-go's fake clientset, which cannot stream lists: the informer
// must sync and then see a node added later.
func TestListWatchInformerOverAWrappedFake(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	c := clientgo.Wrap(cs)
	inf := cache.NewSharedIndexInformer(kubeclient.ListWatch(c, c.CoreV1().Nodes(), nil), &corev1.Node{}, 0, cache.Indexers{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer over a wrapped fake never synced")
	}
	if _, ok, _ := inf.GetStore().GetByKey("a"); !ok {
		t.Error("synced informer lacks node a")
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok, _ := inf.GetStore().GetByKey("b"); ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("informer never saw node b")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
