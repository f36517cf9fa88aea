package topology

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// Topology manager policies (KubeletConfiguration topologyManagerPolicy).
const (
	PolicyNone           = "none"
	PolicyBestEffort     = "best-effort"
	PolicyRestricted     = "restricted"
	PolicySingleNUMANode = "single-numa-node"
)

// Topology manager scopes (topologyManagerScope).
const (
	ScopeContainer = "container"
	ScopePod       = "pod"
)

// Topology manager policy options (topologyManagerPolicyOptions).
const (
	OptionPreferClosestNUMANodes = "prefer-closest-numa-nodes"
	OptionMaxAllowableNUMANodes  = "max-allowable-numa-nodes"
)

const defaultMaxAllowableNUMANodes = 8

// Rejection reasons, spelled as upstream kubelet v1.37.
const (
	// ReasonTopologyAffinity: the merged hint is not acceptable to the
	// restricted or single-numa-node policy.
	ReasonTopologyAffinity = "TopologyAffinityError"
	// ReasonUnexpectedAdmission: a resource manager failed to allocate
	// for a reason of its own.
	ReasonUnexpectedAdmission = "UnexpectedAdmissionError"
)

const messageTopologyAffinity = "Resources cannot be allocated with Topology locality"

// Config configures a Manager. The zero Config is the none policy with
// container scope.
type Config struct {
	// Policy is none (default), best-effort, restricted or single-numa-node.
	Policy string
	// Scope is container (default) or pod.
	Scope string
	// Options are the topologyManagerPolicyOptions.
	Options map[string]string
	// Machine gives the NUMA nodes and their distances; required unless
	// Policy is none.
	Machine *Machine
}

// Manager is the topology manager: a nodekit.Admitter that asks every
// HintProvider where it could place a new pod's resources, merges the
// hints under its policy, rejects the pod with TopologyAffinityError when
// the policy does not accept the result, and otherwise has every provider
// Allocate with the merged affinity. It keeps no state of its own.
//
// Admit is safe for concurrent use if the providers are.
type Manager struct {
	policy    string
	scope     string
	all       NUMAMask
	distances map[int][]uint64
	closest   bool
	providers []HintProvider
}

var _ nodekit.Admitter = (*Manager)(nil)

// NewManager checks cfg and returns a manager aligning the given providers,
// asked in the order given. Unknown policies, scopes or options, and
// machines with more NUMA nodes than max-allowable-numa-nodes (default 8),
// are errors, as upstream.
func NewManager(cfg Config, providers ...HintProvider) (*Manager, error) {
	m := &Manager{policy: cfg.Policy, scope: cfg.Scope, distances: map[int][]uint64{}}
	if m.policy == "" {
		m.policy = PolicyNone
	}
	if m.scope == "" {
		m.scope = ScopeContainer
	}
	for _, p := range providers {
		if p != nil {
			m.providers = append(m.providers, p)
		}
	}
	switch m.scope {
	case ScopeContainer, ScopePod:
	default:
		return nil, fmt.Errorf("topology: unknown scope: %q", cfg.Scope)
	}
	switch m.policy {
	case PolicyNone:
		return m, nil
	case PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode:
	default:
		return nil, fmt.Errorf("topology: unknown policy: %q", cfg.Policy)
	}
	maxNodes := defaultMaxAllowableNUMANodes
	for name, value := range cfg.Options {
		switch name {
		case OptionPreferClosestNUMANodes:
			b, err := strconv.ParseBool(value)
			if err != nil {
				return nil, fmt.Errorf("topology: bad value for option %q: %w", name, err)
			}
			m.closest = b
		case OptionMaxAllowableNUMANodes:
			n, err := strconv.Atoi(value)
			if err != nil {
				return nil, fmt.Errorf("topology: unable to convert policy option to integer %q: %w", name, err)
			}
			if n < defaultMaxAllowableNUMANodes {
				return nil, fmt.Errorf("topology: the minimum value of %q should not be less than %v", name, defaultMaxAllowableNUMANodes)
			}
			maxNodes = n
		default:
			return nil, fmt.Errorf("topology: unknown Topology Manager Policy option: %q", name)
		}
	}
	if cfg.Machine == nil || len(cfg.Machine.NUMANodes) == 0 {
		return nil, fmt.Errorf("topology: policy %q needs Config.Machine with its NUMA nodes", m.policy)
	}
	if len(cfg.Machine.NUMANodes) > maxNodes {
		return nil, fmt.Errorf("topology: policy %q is unsupported on machines with more than %v NUMA Nodes", m.policy, maxNodes)
	}
	for _, n := range cfg.Machine.NUMANodes {
		mask, err := NewNUMAMask(n.ID)
		if err != nil {
			return nil, err
		}
		if m.closest && n.Distances == nil {
			return nil, fmt.Errorf("topology: option %q needs the NUMA distances of node %d", OptionPreferClosestNUMANodes, n.ID)
		}
		m.all |= mask
		m.distances[n.ID] = n.Distances
	}
	return m, nil
}

// Policy returns the manager's policy name.
func (m *Manager) Policy() string { return m.policy }

// Admit aligns and allocates req.Pod's resources. With the none policy it
// only has every provider Allocate without affinity. It does not block
// beyond what the providers do (they write their checkpoints).
func (m *Manager) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(req.Pod))
	pod := req.Pod
	if m.policy == PolicyNone {
		for _, c := range containers(pod) {
			if err := m.allocate(ctx, pod, c, Hint{}); err != nil {
				return AdmitDecision(err)
			}
		}
		return nodekit.Admitted
	}
	if m.scope == ScopePod {
		var hints []map[string][]Hint
		for _, p := range m.providers {
			hints = append(hints, p.PodTopologyHints(ctx, pod))
		}
		best, ok := m.Merge(hints)
		logger.V(2).Info("Pod topology hint", "hint", best, "admit", ok)
		if !ok {
			return nodekit.Decision{Reason: ReasonTopologyAffinity, Message: messageTopologyAffinity}
		}
		for _, c := range containers(pod) {
			if err := m.allocate(ctx, pod, c, best); err != nil {
				return AdmitDecision(err)
			}
		}
		return nodekit.Admitted
	}
	for _, c := range containers(pod) {
		var hints []map[string][]Hint
		for _, p := range m.providers {
			hints = append(hints, p.TopologyHints(ctx, pod, c))
		}
		best, ok := m.Merge(hints)
		logger.V(2).Info("Container topology hint", "container", c.Name, "hint", best, "admit", ok)
		if !ok {
			return nodekit.Decision{Reason: ReasonTopologyAffinity, Message: messageTopologyAffinity}
		}
		if err := m.allocate(ctx, pod, c, best); err != nil {
			return AdmitDecision(err)
		}
	}
	return nodekit.Admitted
}

func (m *Manager) allocate(ctx context.Context, pod *v1.Pod, c *v1.Container, h Hint) error {
	for _, p := range m.providers {
		if err := p.Allocate(ctx, pod, c, h); err != nil {
			return err
		}
	}
	return nil
}

// Merge merges one hint map per provider under the manager's policy and
// reports whether the policy admits the result. It is the pure core of
// Admit, exported for tests of custom providers.
func (m *Manager) Merge(providerHints []map[string][]Hint) (Hint, bool) {
	switch m.policy {
	case PolicyNone:
		return Hint{}, true
	case PolicySingleNUMANode:
		lists := onlySingleNUMA(flatten(providerHints))
		best := newMerger(m.all, m.distances, false, lists).merge(lists)
		if best.NUMANodes == m.all {
			best.NUMANodes = 0
		}
		return best, best.Preferred
	}
	lists := flatten(providerHints)
	best := newMerger(m.all, m.distances, m.closest, lists).merge(lists)
	return best, m.policy == PolicyBestEffort || best.Preferred
}

// AdmitDecision turns an allocation error into a rejection as upstream
// does: an error with a Reason() string method (SMTAlignmentError, ...)
// gives its reason and message, any other error UnexpectedAdmissionError
// with "Allocate failed due to <err>, which is unexpected". A nil error
// admits.
func AdmitDecision(err error) nodekit.Decision {
	if err == nil {
		return nodekit.Admitted
	}
	var r interface{ Reason() string }
	if errors.As(err, &r) {
		return nodekit.Decision{Reason: r.Reason(), Message: err.Error()}
	}
	return nodekit.Decision{
		Reason:  ReasonUnexpectedAdmission,
		Message: fmt.Sprintf("Allocate failed due to %v, which is unexpected", err),
	}
}
