package volumemgr_test

import (
	"context"
	"errors"
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
	"github.com/nodekit/nodekit/kubeclient/clientgo"
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
	w := volumemgr.NewWatching(clientgo.Wrap(cs), clk)
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

// countingClient is a clientset whose ConfigMap GETs are counted and whose
// LISTs (a watch's first list) are held for listDelay.
func countingClient(t *testing.T, cp *agenttest.ControlPlane, listDelay time.Duration) (kubernetes.Interface, func() int) {
	var mu sync.Mutex
	gets := 0
	rc := rest.CopyConfig(cp.Admin)
	rc.QPS, rc.Burst = -1, 0 // no client-side limit: the test times the list itself
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch {
			case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/configmaps/"):
				mu.Lock()
				gets++
				mu.Unlock()
			case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/configmaps") && r.URL.Query().Get("watch") == "":
				time.Sleep(listDelay)
			}
			return rt.RoundTrip(r)
		})
	}
	return kubernetes.NewForConfigOrDie(rc), func() int {
		mu.Lock()
		defer mu.Unlock()
		return gets
	}
}

// stopWatches stops w's watches when the test ends, before its API
// server is stopped (which otherwise waits for them).
func stopWatches(t *testing.T, w *volumemgr.Watching) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func createConfigMap(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A burst of reads of one object before its watch has listed it waits for
// the list: no read GETs the object (before, each of them did).
func TestWatchingBurstWaitsForTheList(t *testing.T) {
	cp := agenttest.StartControlPlane(t)
	cs, gets := countingClient(t, cp, 300*time.Millisecond)
	createConfigMap(t, cs, "burst", "root-ca")
	w := volumemgr.NewWatching(clientgo.Wrap(cs), clocktesting.NewFakeClock(time.Now()))
	w.SyncWait = time.Minute // never reached: the list ends the wait
	stopWatches(t, w)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			got, err := w.GetConfigMap(t.Context(), "burst", "root-ca")
			if err == nil && got.Data["k"] != "v" {
				err = errors.New("wrong data " + got.Data["k"])
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := gets(); n != 0 {
		t.Fatalf("%d GETs for 20 reads during the watch's first list, want 0", n)
	}
}

// A read whose watch has not listed within SyncWait asks the API server.
func TestWatchingReadsLiveAfterSyncWait(t *testing.T) {
	cp := agenttest.StartControlPlane(t)
	cs, gets := countingClient(t, cp, 3*time.Second)
	createConfigMap(t, cs, "slow", "cfg")
	w := volumemgr.NewWatching(clientgo.Wrap(cs), nil) // the real clock times SyncWait
	w.SyncWait = 100 * time.Millisecond
	stopWatches(t, w)
	start := time.Now()
	got, err := w.GetConfigMap(t.Context(), "slow", "cfg")
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("read: %v, %v", got, err)
	}
	if n, took := gets(), time.Since(start); n != 1 || took >= 3*time.Second {
		t.Fatalf("%d GETs after %v, want 1 before the 3 s list ends", n, took)
	}
}
