package main

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
)

// newLogger returns klog's text logger (at klog's -v), or JSON lines on
// stderr, which also follow klog's -v (set from logging.verbosity, and
// changed by PUT /debug/flags/v).
func newLogger(jsonLines bool) logr.Logger {
	if !jsonLines {
		return klog.Background()
	}
	json := funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) }, funcr.Options{Verbosity: math.MaxInt32, LogTimestamp: true})
	return logr.New(klogVerbositySink{json.GetSink()})
}

// klogVerbositySink gates a sink's Info by klog's current -v.
type klogVerbositySink struct{ logr.LogSink }

func (s klogVerbositySink) Enabled(level int) bool {
	return klog.V(klog.Level(level)).Enabled() && s.LogSink.Enabled(level)
}

func (s klogVerbositySink) WithValues(kv ...any) logr.LogSink {
	return klogVerbositySink{s.LogSink.WithValues(kv...)}
}

func (s klogVerbositySink) WithName(name string) logr.LogSink {
	return klogVerbositySink{s.LogSink.WithName(name)}
}

func (s klogVerbositySink) WithCallDepth(depth int) logr.LogSink {
	if d, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return klogVerbositySink{d.WithCallDepth(depth)}
	}
	return s
}

var _ logr.CallDepthLogSink = klogVerbositySink{}

// setKlogVerbosity is the node API's PUT /debug/flags/v: the body is the
// new value of klog's -v (a klog.Level, the flag's Value), answered as
// upstream kubelet answers.
func setKlogVerbosity(val string) (string, error) {
	if _, err := strconv.ParseUint(val, 10, 32); err != nil {
		return "", err
	}
	var level klog.Level
	if err := level.Set(val); err != nil {
		return "", fmt.Errorf("failed set klog.logging.verbosity %s: %w", val, err)
	}
	return "successfully set klog.logging.verbosity to " + val, nil
}
