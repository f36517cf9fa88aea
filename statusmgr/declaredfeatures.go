package statusmgr

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
)

// DeclaredFeaturesConfig is what a node's status.declaredFeatures is
// derived from: the agent's feature gates, what its container runtime
// reports it supports, and the version the node runs.
type DeclaredFeaturesConfig struct {
	// Gates are the agent's resolved feature gates (kubeletconfig.NewGates).
	// Required.
	Gates featuregate.FeatureGate
	// Runtime are the container runtime's features (CRI RuntimeStatus
	// features) that some declared features need: a feature that needs
	// one the runtime lacks is not declared.
	Runtime ndf.RuntimeFeatures
	// KubeletVersion is the node's version; features whose last version is
	// older are not declared. Default "v1.37.2".
	KubeletVersion string
	// NotImplemented names features the agent does not act on although
	// its gates enable them. They are left out of the list, so the
	// scheduler keeps pods needing them off this node (and the
	// DeclaredFeatures admitter refuses such pods with upstream's
	// reason), rather than the node promising what it does not do. Each
	// must be a feature upstream's framework knows.
	NotImplemented []string
}

// DeclaredFeatures returns the node's status.declaredFeatures as kubelet
// v1.37.2 computes it (upstream's node-declared-features framework from
// k8s.io/component-helpers, which decides each feature from the gates,
// the runtime's features and the version), sorted by name, less
// cfg.NotImplemented. The result is fixed for the life of the agent, as
// upstream computes it once at start-up. With the NodeDeclaredFeatures
// gate off it is nil (the node declares nothing, as upstream); otherwise
// an empty list is an empty, non-nil slice.
func DeclaredFeatures(cfg DeclaredFeaturesConfig) ([]string, error) {
	if cfg.Gates == nil {
		return nil, errors.New("declared features: Gates is required")
	}
	if !(gateAdapter{cfg.Gates}).Enabled(gateNodeDeclaredFeatures) {
		return nil, nil
	}
	ver := cfg.KubeletVersion
	if ver == "" {
		ver = DefaultKubeletVersion
	}
	v, err := version.Parse(ver)
	if err != nil {
		return nil, fmt.Errorf("declared features: KubeletVersion %q: %w", ver, err)
	}
	fw := ndf.DefaultFramework
	for _, name := range cfg.NotImplemented {
		if _, err := fw.GetFeatureRequirements(name); err != nil {
			return nil, fmt.Errorf("declared features: NotImplemented %q: %w", name, err)
		}
	}
	found := fw.DiscoverNodeFeatures(&ndf.NodeConfiguration{
		FeatureGates:    gateAdapter{cfg.Gates},
		Version:         v,
		RuntimeFeatures: cfg.Runtime,
	})
	out := make([]string, 0, len(found))
	for _, name := range found {
		if !slices.Contains(cfg.NotImplemented, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// gateNodeDeclaredFeatures turns declared features on (GA and locked on
// in v1.37).
const gateNodeDeclaredFeatures = "NodeDeclaredFeatures"

// gateAdapter lets the framework, which names gates by string, ask a
// component-base feature gate.
type gateAdapter struct{ featuregate.FeatureGate }

// Enabled reports a gate the FeatureGate does not know (component-base
// panics on those) as off: a feature whose gate the agent does not have is
// not declared.
func (g gateAdapter) Enabled(name string) (on bool) {
	defer func() {
		if recover() != nil {
			on = false
		}
	}()
	return g.FeatureGate.Enabled(featuregate.Feature(name))
}

var _ ndf.FeatureGate = gateAdapter{}
