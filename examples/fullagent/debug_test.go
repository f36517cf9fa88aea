package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
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

// PUT /debug/flags/v's setter changes klog's -v, which the JSON logger
// follows too, and answers as upstream.
func TestSetKlogVerbosity(t *testing.T) {
	t.Cleanup(func() { _, _ = setKlogVerbosity("0") })
	if _, err := setKlogVerbosity("0"); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	json := funcr.NewJSON(func(obj string) { buf.WriteString(obj + "\n") }, funcr.Options{Verbosity: 1 << 30})
	logger := logr.New(klogVerbositySink{json.GetSink()}).WithName("n").WithValues("k", "v")
	logger.V(3).Info("hidden")
	if klog.V(3).Enabled() || buf.Len() != 0 {
		t.Fatalf("at -v=0: klog V(3) %v, JSON %q", klog.V(3).Enabled(), buf.String())
	}

	got, err := setKlogVerbosity("3")
	if err != nil || got != "successfully set klog.logging.verbosity to 3" {
		t.Fatalf("set 3: %q, %v", got, err)
	}
	if !klog.V(3).Enabled() || klog.V(4).Enabled() {
		t.Fatalf("after set 3: V(3) %v, V(4) %v", klog.V(3).Enabled(), klog.V(4).Enabled())
	}
	logger.V(3).Info("shown")
	logger.V(4).Info("still hidden")
	if out := buf.String(); !strings.Contains(out, `"msg":"shown"`) || strings.Contains(out, "hidden") {
		t.Fatalf("JSON after set 3: %q", out)
	}

	for _, bad := range []string{"x", "-1", "3\n", ""} {
		if _, err := setKlogVerbosity(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if !klog.V(3).Enabled() || klog.V(4).Enabled() {
		t.Error("a refused value changed the verbosity")
	}
}
