package main

import (
	"errors"
	"time"
)

// labelFilter selects the specs of a run; featuresFilter also lets in the
// specs of feature gates on by default; gatedFilter lets in only those.
// serialFilter and serialFeaturesFilter are the same exclusions for the
// Serial specs (--serial, alone or with --features): never Disruptive,
// Flaky or Alpha ones.
const (
	labelFilter          = `NodeConformance && !Serial && !Disruptive && !Flaky && !Alpha && !/FeatureGate:/ && !/^Feature:/`
	featuresFilter       = `NodeConformance && !Serial && !Disruptive && !Flaky && !Alpha && !BetaOffByDefault && !/^Feature:/`
	gatedFilter          = `(` + featuresFilter + `) && /FeatureGate:/`
	serialFilter         = `NodeConformance && Serial && !Disruptive && !Flaky && !Alpha && !/FeatureGate:/ && !/^Feature:/`
	serialFeaturesFilter = `NodeConformance && Serial && !Disruptive && !Flaky && !Alpha && !BetaOffByDefault && !/^Feature:/`
)

// options are the command line of a run.
type options struct {
	agent, containerd, focus, out     string
	procs                             int
	timeout                           time.Duration
	keep, features, gatedOnly, serial bool
}

// specSet is the set of specs the options select: "" (the non-gated
// ones), "features" (those and the gated ones of gates on by default),
// "gated" (only the gated ones), "serial" (the non-gated Serial ones) or
// "serial-features" (the Serial ones, gated ones of gates on by default
// included); it names the report directory too.
func (o options) specSet() (string, error) {
	switch {
	case o.gatedOnly && o.features:
		return "", errors.New("--gated-only and --features exclude each other")
	case o.serial && o.gatedOnly:
		return "", errors.New("--serial and --gated-only exclude each other (use --serial --features)")
	case o.serial && o.features:
		return "serial-features", nil
	case o.serial:
		return "serial", nil
	case o.gatedOnly:
		return "gated", nil
	case o.features:
		return "features", nil
	}
	return "", nil
}

// filterFor is the ginkgo label filter of a spec set.
func filterFor(set string) string {
	switch set {
	case "features":
		return featuresFilter
	case "gated":
		return gatedFilter
	case "serial":
		return serialFilter
	case "serial-features":
		return serialFeaturesFilter
	}
	return labelFilter
}

// isSerial says whether a spec set runs in one ginkgo process.
func isSerial(set string) bool { return set == "serial" || set == "serial-features" }
