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

// draFilter selects upstream's "[sig-node] DRA" specs (test/e2e/dra: labels
// sig-node and DRA; a ResourceQuota spec of sig-api-machinery also carries
// DRA and stays out) of gates on by default in v1.37: not Alpha,
// BetaOffByDefault or Feature:OffByDefault, never Flaky or Disruptive. In
// e2e.test v1.37.2 that is 103 specs; the four that need two nodes skip
// themselves. draSerialFilter is their Serial ones (--dra --serial), four
// extended-resource specs that deploy upstream's sample device plugin.
const (
	draFilter       = `DRA && sig-node && !Serial && !Disruptive && !Flaky && !Alpha && !BetaOffByDefault && !/^Feature:OffByDefault$/`
	draSerialFilter = `DRA && sig-node && Serial && !Disruptive && !Flaky && !Alpha && !BetaOffByDefault && !/^Feature:OffByDefault$/`
)

// options are the command line of a run.
type options struct {
	agent, containerd, focus, out     string
	procs                             int
	timeout                           time.Duration
	keep, features, gatedOnly, serial bool
	dra                               bool
}

// specSet is the set of specs the options select: "" (the non-gated
// ones), "features" (those and the gated ones of gates on by default),
// "gated" (only the gated ones), "serial" (the non-gated Serial ones) or
// "serial-features" (the Serial ones, gated ones of gates on by default
// included), "dra" (the DRA specs) or "dra-serial" (their Serial ones); it
// names the report directory too.
func (o options) specSet() (string, error) {
	switch {
	case o.dra && (o.features || o.gatedOnly):
		return "", errors.New("--dra is a spec set of its own: it excludes --features and --gated-only")
	case o.dra && o.serial:
		return "dra-serial", nil
	case o.dra:
		return "dra", nil
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
	case "dra":
		return draFilter
	case "dra-serial":
		return draSerialFilter
	}
	return labelFilter
}

// isSerial says whether a spec set runs in one ginkgo process.
func isSerial(set string) bool {
	return set == "serial" || set == "serial-features" || set == "dra-serial"
}

// needsRegistry says whether a spec set pulls images over the wire (the
// Serial NodeConformance specs), so the harness starts a local registry.
func needsRegistry(set string) bool { return set == "serial" || set == "serial-features" }

// isDRA says whether a spec set is of the DRA specs.
func isDRA(set string) bool { return set == "dra" || set == "dra-serial" }
