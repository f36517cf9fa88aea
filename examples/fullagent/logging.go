package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
)

// newLogger returns klog's text logger (honouring -v), or JSON lines on
// stderr at the same verbosity.
func newLogger(jsonLines bool) logr.Logger {
	if !jsonLines {
		return klog.Background()
	}
	v := 0
	if f := flag.Lookup("v"); f != nil {
		v, _ = strconv.Atoi(f.Value.String())
	}
	return funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) }, funcr.Options{Verbosity: v, LogTimestamp: true})
}
