package volumemgr_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/volumemgr"
)

// Reads of a watched ConfigMap come from the watch: after the first, no
// GET reaches the API; a change arrives through the watch; a missing
// object is reported as the API server reports it; idle watches stop.
func TestWatchingGetter(t *testing.T) {
	cp := agenttest.StartControlPlane(t)
	ctx := t.Context()
	var mu sync.Mutex
	n := 0
	rc := rest.CopyConfig(cp.Admin)
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/configmaps/") {
				mu.Lock()
				n++
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	}
	cs := kubernetes.NewForConfigOrDie(rc)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns"}, Data: map[string]string{"k": "v1"}}
	cm, err := cs.CoreV1().ConfigMaps("ns").Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	w := volumemgr.NewWatching(cs, clk)
	gets := func() int { // GETs of single ConfigMaps sent so far
		mu.Lock()
		defer mu.Unlock()
		return n
	}
	got, err := w.GetConfigMap(ctx, "ns", "cfg")
	if err != nil || got.Data["k"] != "v1" {
		t.Fatalf("first read: %v, %v", got, err)
	}
	// Once the watch has synced, reads are served from it.
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		before := gets()
		_, err := w.GetConfigMap(ctx, "ns", "cfg")
		return err == nil && gets() == before, nil
	})
	if err != nil {
		t.Fatal("reads still GET the API server after the watch started")
	}
	before := gets()
	for range 10 {
		if _, err := w.GetConfigMap(ctx, "ns", "cfg"); err != nil {
			t.Fatal(err)
		}
	}
	if n := gets() - before; n != 0 {
		t.Fatalf("%d GETs for 10 watched reads", n)
	}
	cm.Data["k"] = "v2"
	if _, err := cs.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		got, err := w.GetConfigMap(ctx, "ns", "cfg")
		return err == nil && got.Data["k"] == "v2", nil
	})
	if err != nil {
		t.Fatal("the update never reached the watched copy")
	}
	if _, err := w.GetSecret(ctx, "ns", "absent"); !apierrors.IsNotFound(err) {
		t.Fatalf("missing secret: %v", err)
	}
	if n := w.Watched(); n != 2 {
		t.Fatalf("%d watches, want 2", n)
	}
	clk.Step(6 * time.Minute)
	w.StopIdle()
	if n := w.Watched(); n != 0 {
		t.Fatalf("%d watches left after 6 idle minutes", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
