package main

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	nodev1listers "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
)

func TestRuntimeClassLookup(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"})
	r := &runtimeClasses{lister: nodev1listers.NewRuntimeClassLister(idx)}
	pod := func(uid, class string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID("u" + uid)}}
		if class != "" {
			p.Spec.RuntimeClassName = &class
		}
		return p
	}
	if h, err := r.handlerFor(pod("1", "")); err != nil || h != "" {
		t.Fatalf("no class: %q, %v", h, err)
	}
	if h, err := r.handlerFor(pod("2", "gvisor")); err != nil || h != "runsc" {
		t.Fatalf("gvisor: %q, %v", h, err)
	}
	if _, err := r.handlerFor(pod("3", "missing")); err == nil || !strings.Contains(err.Error(), `RuntimeClass "missing" not found`) {
		t.Fatalf("missing class: %v", err)
	}
	// A running pod keeps its handler when its class is deleted.
	_ = idx.Delete(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}})
	if h, err := r.handlerFor(pod("2", "gvisor")); err != nil || h != "runsc" {
		t.Fatalf("after deletion, known pod: %q, %v", h, err)
	}
	if _, err := r.handlerFor(pod("4", "gvisor")); err == nil {
		t.Fatal("after deletion, a new pod got a handler")
	}
	r.forget(nil)
	if _, err := r.handlerFor(pod("2", "gvisor")); err == nil {
		t.Fatal("a forgotten pod kept its handler")
	}
	// Standalone: classes are ignored.
	var none *runtimeClasses
	if h, err := none.handlerFor(pod("5", "gvisor")); err != nil || h != "" {
		t.Fatalf("standalone: %q, %v", h, err)
	}
}
