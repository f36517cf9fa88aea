package main

import (
	"testing"

	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/server"
)

// enableContentionProfiling turns block profiling on only where upstream
// does: with the server, the debugging handlers and the profiling handler.
func TestContentionProfiling(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  kubeletv1beta1.KubeletConfiguration
		want bool
	}{
		{"unset", kubeletv1beta1.KubeletConfiguration{}, false},
		{"set, defaults", kubeletv1beta1.KubeletConfiguration{EnableContentionProfiling: true}, true},
		{"set, all on", kubeletv1beta1.KubeletConfiguration{EnableContentionProfiling: true, EnableServer: ptr.To(true),
			EnableDebuggingHandlers: ptr.To(true), EnableProfilingHandler: ptr.To(true)}, true},
		{"no server", kubeletv1beta1.KubeletConfiguration{EnableContentionProfiling: true, EnableServer: ptr.To(false)}, false},
		{"no debugging", kubeletv1beta1.KubeletConfiguration{EnableContentionProfiling: true, EnableDebuggingHandlers: ptr.To(false)}, false},
		{"no profiling", kubeletv1beta1.KubeletConfiguration{EnableContentionProfiling: true, EnableProfilingHandler: ptr.To(false)}, false},
	} {
		if got := contentionProfiling(&tc.cfg); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// PUT /debug/flags/v's setter (with enableDebugFlagsHandler on, the
// default) is upstream's: it changes klog's -v and answers as upstream;
// off, there is none.
func TestSetKlogVerbosity(t *testing.T) {
	on, off := &server.Config{}, &server.Config{}
	if err := servingConfig(t.Context(), &kubeletv1beta1.KubeletConfiguration{}, on); err != nil {
		t.Fatal(err)
	}
	if err := servingConfig(t.Context(), &kubeletv1beta1.KubeletConfiguration{EnableDebugFlagsHandler: ptr.To(false)}, off); err != nil {
		t.Fatal(err)
	}
	if on.SetVerbosity == nil || off.SetVerbosity != nil {
		t.Fatalf("SetVerbosity set: default %v, enableDebugFlagsHandler false %v; want true, false", on.SetVerbosity != nil, off.SetVerbosity != nil)
	}
	set := on.SetVerbosity
	t.Cleanup(func() { _, _ = set("0") })
	if _, err := set("0"); err != nil {
		t.Fatal(err)
	}
	if klog.V(3).Enabled() {
		t.Fatal("at -v=0: klog V(3) enabled")
	}
	got, err := set("3")
	if err != nil || got != "successfully set klog.logging.verbosity to 3" {
		t.Fatalf("set 3: %q, %v", got, err)
	}
	if !klog.V(3).Enabled() || klog.V(4).Enabled() {
		t.Fatalf("after set 3: V(3) %v, V(4) %v", klog.V(3).Enabled(), klog.V(4).Enabled())
	}
	for _, bad := range []string{"x", "-1", "3\n", ""} {
		if _, err := set(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if !klog.V(3).Enabled() || klog.V(4).Enabled() {
		t.Error("a refused value changed the verbosity")
	}
}
