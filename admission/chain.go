package admission

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

// Chain runs Admitters in order; the first rejection wins. The zero Chain
// admits everything. A Chain is itself a nodekit.Admitter, so chains nest.
//
// Add and Admit must not run concurrently: build the chain, then hand it to
// the one goroutine that admits pods.
type Chain struct {
	admitters []nodekit.Admitter
}

var _ nodekit.Admitter = (*Chain)(nil)

// NewChain returns a chain of the given admitters, run in the order given.
// Nil admitters are skipped.
func NewChain(admitters ...nodekit.Admitter) *Chain {
	c := &Chain{admitters: make([]nodekit.Admitter, 0, len(admitters))}
	for _, a := range admitters {
		c.Add(a)
	}
	return c
}

// Add appends a to the end of the chain. A nil a is ignored.
func (c *Chain) Add(a nodekit.Admitter) {
	if a == nil {
		return
	}
	c.admitters = append(c.admitters, a)
}

// Admit asks each admitter in turn, passing req unchanged, and returns the
// first rejection as is, or nodekit.Admitted when all of them admit. Later
// admitters are not asked after a rejection. Admit does not look at ctx
// itself; an admitter that may block honours it.
func (c *Chain) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	for _, a := range c.admitters {
		if d := a.Admit(ctx, req); !d.Admit {
			return d
		}
	}
	return nodekit.Admitted
}

// NodeGetter gives the built-in admitters the node they admit pods onto:
// its name, labels, taints, allocatable resources and status.features.
type NodeGetter interface {
	// Node returns the current node object. It should answer from a local
	// cache (an informer, or the object the agent registered) and not block
	// on the network. The node is shared and read-only: admitters never
	// modify it. An error rejects the pod with reason InvalidNodeInfo.
	Node(ctx context.Context) (*v1.Node, error)
}

// NodeFunc adapts a function to NodeGetter.
type NodeFunc func(ctx context.Context) (*v1.Node, error)

// Node implements NodeGetter.
func (f NodeFunc) Node(ctx context.Context) (*v1.Node, error) { return f(ctx) }

var _ NodeGetter = NodeFunc(nil)

// FreshNodeGetter is an optional capability of a NodeGetter. When the only
// thing keeping a pod off the node is its node selector or required node
// affinity, NodeAffinity asks a getter that has it for an uncached node and
// checks again, as upstream kubelet does: a label added to the node just
// before the pod was bound may not have reached the cache yet. FreshNode may
// block on the API server; ctx bounds it.
type FreshNodeGetter interface {
	FreshNode(ctx context.Context) (*v1.Node, error)
}

// Builtins returns the checks of upstream kubelet's predicate admit handler
// (v1.37) as separate admitters, in the order upstream checks them, so the
// first rejection carries the reason upstream would report:
//
//	OS, SupplementalGroupsPolicy, ResourceFit, NodeAffinity, NodeName,
//	NodePorts, TaintToleration, PodFeatures
//
// PodFeatures (as upstream's pod-features handler) refuses pods needing
// what nodekit does not implement (DRA claims); it is last, as upstream.
// Options are passed to NewPodFeatures (WithoutRestartAllContainers for an
// agent whose RestartAllContainersOnContainerExits gate is off). Upstream's declared-features
// handler is DeclaredFeatures, chained after AppArmor (ChainConfig).
//
// The other upstream admit handlers live in the packages that own their
// subsystem. To keep upstream's precedence an agent chains them around these:
// eviction, sysctls, and the CPU/memory/topology/device managers before
// Builtins; AppArmor and node shutdown after; custom policies last.
// DefaultChain builds that order.
func Builtins(node NodeGetter, opts ...PodFeaturesOption) []nodekit.Admitter {
	return []nodekit.Admitter{
		NewOS(node),
		NewSupplementalGroupsPolicy(node),
		NewResourceFit(node),
		NewNodeAffinity(node),
		NewNodeName(node),
		NewNodePorts(),
		NewTaintToleration(node),
		NewPodFeatures(opts...),
	}
}

// ChainConfig names the admit handlers of upstream kubelet that live
// outside this package (they belong to the packages owning their
// subsystem), so DefaultChain can put each in upstream's place. A nil field
// is left out.
type ChainConfig struct {
	// Node is what Builtins(Node) admit against; unused when Builtins is
	// set.
	Node NodeGetter
	// Builtins, when not nil, stands in for Builtins(Node): an agent that
	// wraps one of them (say ResourceFit, to see the node's allocatable as
	// a device manager sanitizes it) passes its own list, in that order.
	Builtins []nodekit.Admitter

	Eviction  nodekit.Admitter // node pressure (eviction.Manager)
	Sysctls   nodekit.Admitter // *Sysctls
	Resources nodekit.Admitter // the topology manager, which has the CPU and memory managers allocate
	Devices   nodekit.Admitter // device plugins (devicemgr.Manager)
	AppArmor  nodekit.Admitter // *AppArmor
	// DeclaredFeatures refuses pods needing a feature the node does not
	// declare (*DeclaredFeatures); after AppArmor, as upstream.
	DeclaredFeatures nodekit.Admitter
	Shutdown         nodekit.Admitter // graceful node shutdown (shutdown.Manager)

	// Custom are the agent's own policies, run last in the order given.
	Custom []nodekit.Admitter
}

// DefaultChain returns the admitters of cfg in the order upstream kubelet
// (v1.37) runs its admit handlers, so the first rejection carries the
// reason upstream would report:
//
//	Eviction, Sysctls, Resources, Devices, the built-in predicates
//	(Builtins), AppArmor, DeclaredFeatures, Shutdown, then Custom
//
// Hand the result to the loop (syncloop.Config.Admitters) or to NewChain.
func DefaultChain(cfg ChainConfig) []nodekit.Admitter {
	builtins := cfg.Builtins
	if builtins == nil {
		builtins = Builtins(cfg.Node)
	}
	ordered := make([]nodekit.Admitter, 0, 7+len(builtins)+len(cfg.Custom))
	ordered = append(ordered, cfg.Eviction, cfg.Sysctls, cfg.Resources, cfg.Devices)
	ordered = append(ordered, builtins...)
	ordered = append(ordered, cfg.AppArmor, cfg.DeclaredFeatures, cfg.Shutdown)
	ordered = append(ordered, cfg.Custom...)
	out := ordered[:0]
	for _, a := range ordered {
		if a != nil {
			out = append(out, a)
		}
	}
	return out
}

// getNode fetches the node, turning a failure or a nil node into upstream's
// InvalidNodeInfo rejection.
func getNode(ctx context.Context, g NodeGetter) (*v1.Node, nodekit.Decision, bool) {
	if g == nil {
		return nil, invalidNodeInfo(), false
	}
	node, err := g.Node(ctx)
	if err != nil || node == nil {
		return nil, invalidNodeInfo(), false
	}
	return node, nodekit.Admitted, true
}

func invalidNodeInfo() nodekit.Decision {
	return nodekit.Decision{Reason: ReasonInvalidNodeInfo, Message: messageInvalidNodeInfo}
}

// predicateFailure builds upstream's "Predicate <name> failed: <desc>"
// rejection, whose Reason is the predicate's name.
func predicateFailure(name, desc string) nodekit.Decision {
	return nodekit.Decision{Reason: name, Message: "Predicate " + name + " failed: " + desc}
}

// otherActivePods calls fn for each pod in req.Pods that still holds node
// resources: not nil, not in a terminal phase, and not the pod being
// admitted (matched by pointer, or by UID when it has one).
func otherActivePods(req nodekit.AdmitRequest, fn func(*v1.Pod)) {
	for _, p := range req.Pods {
		if p == nil || p == req.Pod {
			continue
		}
		if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		if req.Pod != nil && req.Pod.UID != "" && p.UID == req.Pod.UID {
			continue
		}
		fn(p)
	}
}
