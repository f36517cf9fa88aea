package kubeletconfig

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
)

// Feature gates this package's defaults and validation consult.
const (
	gateCrashLoopBackOffMax      featuregate.Feature = "KubeletCrashLoopBackOffMax"
	gateEnsureSecretPulledImages featuregate.Feature = "KubeletEnsureSecretPulledImages"
	gateCPUCFSQuotaPeriod        featuregate.Feature = "CustomCPUCFSQuotaPeriod"
	gateImageMaximumGCAge        featuregate.Feature = "ImageMaximumGCAge"
	gateDefaultPodSysctls        featuregate.Feature = "DefaultPodSysctls"
	gateRotateServerCertificate  featuregate.Feature = "RotateKubeletServerCertificate"
	gateGracefulNodeShutdown     featuregate.Feature = "GracefulNodeShutdown"
	gateShutdownBasedOnPriority  featuregate.Feature = "GracefulNodeShutdownBasedOnPodPriority"
	gateNodeSwap                 featuregate.Feature = "NodeSwap"
	gateMemoryQoS                featuregate.Feature = "MemoryQoS"
	gateNodeLogQuery             featuregate.Feature = "NodeLogQuery"
)

// NewGates resolves featureGates (a KubeletConfiguration's, or
// --feature-gates) over the gates kubelet v1.37.2 knows and their
// defaults. An unknown gate, a gate locked to its default set to the
// other value, or a gate enabled without a gate it depends on (upstream's
// dependency table) is an error naming it. The result is the caller's: no
// global gate is read or written.
// Warnings (setting a GA or deprecated gate) go to ctx's logger.
func NewGates(ctx context.Context, set map[string]bool) (featuregate.FeatureGate, error) {
	return newGates(klog.FromContext(ctx), set)
}

func newGates(logger klog.Logger, set map[string]bool) (featuregate.FeatureGate, error) {
	fg := featuregate.NewFeatureGate()
	if err := fg.Add(upstreamGates()); err != nil {
		return nil, fmt.Errorf("feature gate table: %w", err)
	}
	if err := fg.AddDependencies(upstreamGateDependencies()); err != nil {
		return nil, fmt.Errorf("feature gate dependencies: %w", err)
	}
	if err := fg.SetFromMapWithLogger(logger, set); err != nil {
		return nil, fmt.Errorf("featureGates: %w", err)
	}
	if errs := fg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("featureGates: %w", errors.Join(errs...))
	}
	return fg, nil
}

// KnownGate reports whether kubelet v1.37.2 knows the gate, and its
// default there.
func KnownGate(name string) (known, def bool) {
	spec, ok := upstreamGates()[featuregate.Feature(name)]
	return ok, spec.Default
}

// NonDefaultGates lists, sorted, the gates of set whose value differs
// from kubelet v1.37.2's default (unknown gates included: they have no
// default to equal).
func NonDefaultGates(set map[string]bool) []string {
	known := upstreamGates()
	var out []string
	for name, v := range set {
		spec, ok := known[featuregate.Feature(name)]
		if !ok || spec.Default != v {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

//go:generate sh -c "cd ../hack/tools && go run ./kubeletgates > ../../kubeletconfig/zz_gates.go"
