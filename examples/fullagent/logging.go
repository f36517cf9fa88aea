package main

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
)

// newLogger returns klog's text logger (at klog's -v), or JSON lines on
// stderr at verbosity v.
func newLogger(jsonLines bool, v int) logr.Logger {
	if !jsonLines {
		return klog.Background()
	}
	return funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) }, funcr.Options{Verbosity: v, LogTimestamp: true})
}
