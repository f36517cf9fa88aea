package clientgo_test

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/watchlist"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

// TestWrapKeepsWhatTheClientsetSaysOfWatchList checks a reflector sees
// through the wrapper: the fake clientset cannot stream a list, so an
// informer over a wrapped fake must list and watch instead of waiting
// for a stream that never comes; a real clientset can.
func TestWrapKeepsWhatTheClientsetSaysOfWatchList(t *testing.T) {
	if !watchlist.DoesClientNotSupportWatchListSemantics(clientgo.Wrap(fake.NewClientset())) {
		t.Error("a wrapped fake clientset claims streaming lists")
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if watchlist.DoesClientNotSupportWatchListSemantics(clientgo.Wrap(cs)) {
		t.Error("a wrapped real clientset claims no streaming lists")
	}
}
