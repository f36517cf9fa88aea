package statusmgr

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/nodekit/nodekit/internal/clockwait"
	"github.com/nodekit/nodekit/kubeclient"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults of NodeConfig.
const (
	DefaultMaxPods               = 110
	DefaultKubeletVersion        = "v1.37.2"
	DefaultKubeletPort           = 10250
	DefaultStatusUpdateFrequency = 10 * time.Second
	DefaultStatusReportFrequency = 5 * time.Minute
)

// Labels the node agent sets on its Node (and keeps set).
const (
	labelBetaOS   = "beta.kubernetes.io/os"
	labelBetaArch = "beta.kubernetes.io/arch"
)

// RuntimeVersioner reports the container runtime's name and version, e.g.
// "containerd://2.1.4". criruntime.Runtime satisfies it.
type RuntimeVersioner interface {
	Version(ctx context.Context) (string, error)
}

// StatusSetter fills part of the Node's status the NodeReporter does not
// know about (images, volumes in use, device plugin resources). Setters run
// after the machine fields and before the conditions.
type StatusSetter interface {
	// SetNodeStatus modifies node in place. It runs on every status
	// computation and should answer from state it keeps. An error is
	// logged; what the setter changed stays.
	SetNodeStatus(ctx context.Context, node *v1.Node) error
}

// StatusSetterFunc adapts a function to StatusSetter.
type StatusSetterFunc func(ctx context.Context, node *v1.Node) error

// SetNodeStatus implements StatusSetter.
func (f StatusSetterFunc) SetNodeStatus(ctx context.Context, node *v1.Node) error {
	return f(ctx, node)
}

var _ StatusSetter = StatusSetterFunc(nil)

// NodeConfig configures a NodeReporter. Only NodeName is required.
type NodeConfig struct {
	// NodeName is the Node object's name.
	NodeName string
	// Hostname is the Hostname address and the kubernetes.io/hostname
	// label. Default NodeName.
	Hostname string
	// NodeIP is the InternalIP address. "" picks the first global unicast
	// address of the host's interfaces (IPv4 first).
	NodeIP string
	// Labels are added to the default labels (and override them). They are
	// applied at registration and, if the Node exists already, reconciled
	// then; labels set by others are left alone.
	Labels map[string]string
	// Annotations are set at registration, like Labels.
	Annotations map[string]string
	// Taints are set when the Node is created (not reconciled after).
	Taints []v1.Taint
	// ProviderID is spec.providerID when the Node is created.
	ProviderID string
	// MaxPods is the pods capacity. Default 110.
	MaxPods int
	// Reserved is subtracted from capacity to give allocatable (system and
	// kube reservations, hard eviction thresholds). Huge pages are always
	// subtracted from allocatable memory.
	Reserved v1.ResourceList
	// KubeletVersion is status.nodeInfo.kubeletVersion. Default "v1.37.2".
	KubeletVersion string
	// KubeletPort is status.daemonEndpoints.kubeletEndpoint.port. Default
	// 10250.
	KubeletPort int32
	// Machine describes the machine. Default HostMachine{}.
	Machine MachineInfo
	// Runtime gives status.nodeInfo.containerRuntimeVersion. Nil leaves it
	// empty; a failure keeps the previous value.
	Runtime RuntimeVersioner
	// Conditions maps each node condition type to its provider. Missing
	// standard types get defaults: Ready always true (see ReadyCondition),
	// MemoryPressure, DiskPressure and PIDPressure never (see
	// PressureCondition). Other types may be added.
	Conditions map[v1.NodeConditionType]ConditionProvider
	// DeclaredFeatures is status.declaredFeatures, the node features the
	// scheduler matches pods' needs against; compute it with
	// DeclaredFeatures(DeclaredFeaturesConfig). Nil leaves the field as it
	// is (off, as upstream with the NodeDeclaredFeatures gate off); an
	// empty list clears it.
	DeclaredFeatures []string
	// Setters fill further status fields.
	Setters []StatusSetter
	// Reported, when set, is given the Node as the API server has it
	// after each status sync that succeeded: the status just patched, or
	// the Node read when nothing changed (and the Node just created). The
	// volume manager learns from it which volumes the status lists in
	// volumesInUse (upstream's markVolumesFromNode). It must not block.
	Reported func(node *v1.Node)
	// Cached, when set, returns the Node from a local cache (an informer
	// on this node); SyncOnce computes the status from it instead of
	// GETting the Node every StatusUpdateFrequency, as upstream reads its
	// informer first. It GETs when the cache has no Node or the previous
	// patch failed. Beware: until the cache's watch is back after an API
	// server outage (client-go's informers retry it with a back-off of up
	// to a minute) a change made by others, such as the node lifecycle
	// controller marking the node Unknown, goes unseen, and the status
	// computed from the stale Node is not patched until the change comes
	// or StatusReportFrequency passes. CachedUnlessFailing reads the API
	// server instead while the Lease's renewals fail and for a while
	// after.
	Cached func() (*v1.Node, bool)
	// StatusUpdateFrequency is how often Run computes the status and
	// patches it if it changed. Default 10s.
	StatusUpdateFrequency time.Duration
	// StatusReportFrequency is the longest Run goes without patching the
	// status even when nothing changed. Default 5m.
	StatusReportFrequency time.Duration
	// Clock stamps condition times and drives Run. Default: the real clock.
	Clock clock.Clock
	// Startup, when set, is told of the node's first registration attempt,
	// of the Node being created, and of each status written with Ready
	// true (upstream's kubelet_node_startup_* metrics; server.AgentMetrics
	// satisfies it).
	Startup StartupRecorder
}

// StartupRecorder receives the moments of the node's start-up.
type StartupRecorder interface {
	RegistrationAttempted(t time.Time)
	// NodeRegistered: the agent created the Node (not when it existed).
	NodeRegistered(t time.Time)
	// NodeReady: a status with Ready true was written.
	NodeReady(t time.Time)
}

type noStartup struct{}

func (noStartup) RegistrationAttempted(time.Time) {}
func (noStartup) NodeRegistered(time.Time)        {}
func (noStartup) NodeReady(time.Time)             {}

// NodeReporter registers the node's Node object and keeps its status fresh:
// capacity and allocatable, addresses, nodeInfo, daemon endpoints and
// conditions. It works with the node's own credentials. Its methods are
// safe for concurrent use (they are serialized).
type NodeReporter struct {
	client kubeclient.Interface
	cfg    NodeConfig
	nodeIP net.IP

	mu         sync.Mutex
	registered bool
	lastReport time.Time
	getNext    bool // read the Node from the API server, not Cached
}

// NewNodeReporter validates cfg and returns a NodeReporter writing through
// client. Nothing is sent until Register, SyncOnce or Run.
func NewNodeReporter(client kubeclient.Interface, cfg NodeConfig) (*NodeReporter, error) {
	if err := validateNodeConfig(&cfg); err != nil {
		return nil, err
	}
	r := &NodeReporter{client: client, cfg: cfg}
	if cfg.NodeIP != "" {
		r.nodeIP = net.ParseIP(cfg.NodeIP)
	}
	if cfg.Hostname == "" {
		r.cfg.Hostname = cfg.NodeName
	}
	if cfg.MaxPods == 0 {
		r.cfg.MaxPods = DefaultMaxPods
	}
	if cfg.KubeletVersion == "" {
		r.cfg.KubeletVersion = DefaultKubeletVersion
	}
	if cfg.KubeletPort == 0 {
		r.cfg.KubeletPort = DefaultKubeletPort
	}
	if cfg.Startup == nil {
		r.cfg.Startup = noStartup{}
	}
	if cfg.Machine == nil {
		r.cfg.Machine = HostMachine{}
	}
	if cfg.StatusUpdateFrequency == 0 {
		r.cfg.StatusUpdateFrequency = DefaultStatusUpdateFrequency
	}
	if cfg.StatusReportFrequency == 0 {
		r.cfg.StatusReportFrequency = DefaultStatusReportFrequency
	}
	if cfg.Clock == nil {
		r.cfg.Clock = clock.RealClock{}
	}
	conds := maps.Clone(cfg.Conditions)
	if conds == nil {
		conds = map[v1.NodeConditionType]ConditionProvider{}
	}
	if conds[v1.NodeReady] == nil {
		conds[v1.NodeReady] = ReadyCondition()
	}
	for _, t := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		if conds[t] == nil {
			conds[t] = PressureCondition(t, nil)
		}
	}
	r.cfg.Conditions = conds
	return r, nil
}

func validateNodeConfig(cfg *NodeConfig) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: NodeConfig.%s: %s", ErrInvalid, field, fmt.Sprintf(format, args...)))
	}
	if cfg.NodeName == "" {
		bad("NodeName", "required")
	} else if msgs := validation.IsDNS1123Subdomain(cfg.NodeName); len(msgs) > 0 {
		bad("NodeName", "%q: %s", cfg.NodeName, strings.Join(msgs, "; "))
	}
	if cfg.NodeIP != "" && net.ParseIP(cfg.NodeIP) == nil {
		bad("NodeIP", "%q is not an IP address", cfg.NodeIP)
	}
	for k, v := range cfg.Labels {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			bad("Labels", "key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			bad("Labels", "value %q of %q: %s", v, k, strings.Join(msgs, "; "))
		}
	}
	for i, t := range cfg.Taints {
		if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
			bad(fmt.Sprintf("Taints[%d].Key", i), "%q: %s", t.Key, strings.Join(msgs, "; "))
		}
		switch t.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			bad(fmt.Sprintf("Taints[%d].Effect", i), "%q is not NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
		}
	}
	if cfg.MaxPods < 0 {
		bad("MaxPods", "%d is negative", cfg.MaxPods)
	}
	if cfg.KubeletPort < 0 || cfg.KubeletPort > 65535 {
		bad("KubeletPort", "%d is not a port", cfg.KubeletPort)
	}
	if cfg.StatusUpdateFrequency < 0 || cfg.StatusReportFrequency < 0 {
		bad("StatusUpdateFrequency", "frequencies must not be negative")
	}
	for name, q := range cfg.Reserved {
		if q.Sign() < 0 {
			bad("Reserved", "%s is negative", name)
		}
	}
	for i := 1; i < len(cfg.DeclaredFeatures); i++ {
		if cfg.DeclaredFeatures[i-1] >= cfg.DeclaredFeatures[i] {
			bad("DeclaredFeatures", "%q and %q: the list must be sorted, without repeats", cfg.DeclaredFeatures[i-1], cfg.DeclaredFeatures[i])
			break
		}
	}
	return errors.Join(errs...)
}

// Register creates the Node object, with labels, taints and a full status.
// If it exists already (a restart, or someone created it) it is reconciled
// instead: the labels and annotations the agent owns (kubernetes.io/hostname,
// os and arch, the beta os and arch labels, and NodeConfig.Labels and
// Annotations) are set, others are kept. One attempt; it blocks on the API
// server. Run retries it with back-off.
func (r *NodeReporter) Register(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.registerLocked(ctx)
}

func (r *NodeReporter) registerLocked(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	r.cfg.Startup.RegistrationAttempted(r.cfg.Clock.Now())
	node, err := r.initialNode(ctx)
	if err != nil {
		return err
	}
	nodes := r.client.CoreV1().Nodes()
	_, err = nodes.Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		logger.Info("Registered node", "node", r.cfg.NodeName)
		r.registered = true
		r.lastReport = r.cfg.Clock.Now()
		r.cfg.Startup.NodeRegistered(r.lastReport)
		r.recordReady(node)
		r.reported(node)
		return nil
	}
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("register node %s: %w", r.cfg.NodeName, err)
	}
	existing, gerr := nodes.Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
	if gerr != nil {
		return fmt.Errorf("register node %s: %w; reading the existing Node: %w", r.cfg.NodeName, err, gerr)
	}
	updated := existing.DeepCopy()
	changed := reconcileStrings(&updated.Labels, node.Labels)
	changed = reconcileStrings(&updated.Annotations, node.Annotations) || changed
	if updated.Status.Capacity == nil && node.Status.Capacity != nil {
		updated.Status.Capacity = node.Status.Capacity.DeepCopy()
		updated.Status.Allocatable = node.Status.Allocatable.DeepCopy()
		changed = true
	}
	if changed {
		if err := r.patch(ctx, existing, updated); err != nil {
			return fmt.Errorf("register node %s: reconcile the existing Node: %w", r.cfg.NodeName, err)
		}
	}
	logger.Info("Node was registered before; reconciled it", "node", r.cfg.NodeName, "changed", changed)
	r.registered = true
	return nil
}

// reconcileStrings sets every key of want in *have; it reports a change.
func reconcileStrings(have *map[string]string, want map[string]string) bool {
	changed := false
	for k, v := range want {
		if cur, ok := (*have)[k]; ok && cur == v {
			continue
		}
		if *have == nil {
			*have = map[string]string{}
		}
		(*have)[k] = v
		changed = true
	}
	return changed
}

// ownLabels are the labels the agent sets: defaults, then configured ones.
func (r *NodeReporter) ownLabels() map[string]string {
	l := map[string]string{
		v1.LabelHostname:   r.cfg.Hostname,
		v1.LabelOSStable:   goruntime.GOOS,
		v1.LabelArchStable: goruntime.GOARCH,
		labelBetaOS:        goruntime.GOOS,
		labelBetaArch:      goruntime.GOARCH,
	}
	maps.Copy(l, r.cfg.Labels)
	return l
}

func (r *NodeReporter) initialNode(ctx context.Context) (*v1.Node, error) {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        r.cfg.NodeName,
			Labels:      r.ownLabels(),
			Annotations: maps.Clone(r.cfg.Annotations),
		},
		Spec: v1.NodeSpec{
			Taints:     append([]v1.Taint(nil), r.cfg.Taints...),
			ProviderID: r.cfg.ProviderID,
		},
	}
	if err := r.setStatus(ctx, node); err != nil {
		return nil, fmt.Errorf("register node %s: %w", r.cfg.NodeName, err)
	}
	return node, nil
}

// SyncOnce registers the node if that has not succeeded yet, then computes
// the status from the Node as the API server has it and patches it if
// anything but heartbeat times changed, or if StatusReportFrequency passed
// since the last patch. It blocks on the API server. If the Node was
// deleted, the next SyncOnce registers it again.
func (r *NodeReporter) SyncOnce(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.registered {
		if err := r.registerLocked(ctx); err != nil {
			return err
		}
	}
	existing, err := r.current(ctx)
	if apierrors.IsNotFound(err) {
		r.registered = false
		return fmt.Errorf("node %s was deleted; it will be registered again: %w", r.cfg.NodeName, err)
	}
	if err != nil {
		return fmt.Errorf("get node %s: %w", r.cfg.NodeName, err)
	}
	updated := existing.DeepCopy()
	labelsChanged := reconcileStrings(&updated.Labels, map[string]string{
		v1.LabelOSStable: goruntime.GOOS, v1.LabelArchStable: goruntime.GOARCH,
	})
	if err := r.setStatus(ctx, updated); err != nil {
		klog.FromContext(ctx).Error(err, "Node status is incomplete", "node", r.cfg.NodeName)
	}
	changed := labelsChanged || nodeStatusChanged(&existing.Status, &updated.Status)
	if !changed && r.cfg.Clock.Since(r.lastReport) < r.cfg.StatusReportFrequency {
		r.reported(existing)
		return nil
	}
	if err := r.patch(ctx, existing, updated); err != nil {
		r.getNext = true // the cache may be stale: read the API next time
		return fmt.Errorf("update node %s status: %w", r.cfg.NodeName, err)
	}
	r.getNext = false
	r.lastReport = r.cfg.Clock.Now()
	r.recordReady(updated)
	r.reported(updated)
	return nil
}

// reported hands the Node the API server has to NodeConfig.Reported.
func (r *NodeReporter) reported(node *v1.Node) {
	if r.cfg.Reported != nil {
		r.cfg.Reported(node)
	}
}

// recordReady tells Startup when a status written says Ready.
func (r *NodeReporter) recordReady(node *v1.Node) {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
			r.cfg.Startup.NodeReady(r.cfg.Clock.Now())
		}
	}
}

// current returns the Node to compute the status from: the cached one
// when there is a cache and the last patch went through, else the API
// server's.
func (r *NodeReporter) current(ctx context.Context) (*v1.Node, error) {
	if r.cfg.Cached != nil && !r.getNext {
		if n, ok := r.cfg.Cached(); ok && n != nil {
			return n, nil
		}
	}
	return r.client.CoreV1().Nodes().Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
}

// Run calls SyncOnce every StatusUpdateFrequency until ctx is done, then
// returns ctx.Err(). Until the node is registered, failed attempts are
// retried with back-off from 200ms doubling to 7s. Failures are logged with
// the logger from ctx.
func (r *NodeReporter) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var backoff time.Duration
	for {
		wait := r.cfg.StatusUpdateFrequency
		if err := r.SyncOnce(ctx); err != nil && ctx.Err() == nil {
			r.mu.Lock()
			registered := r.registered
			r.mu.Unlock()
			if !registered {
				backoff = nextBackoff(backoff)
				wait = backoff
			}
			logger.Error(err, "Node status sync failed; will retry", "node", r.cfg.NodeName, "retryIn", wait)
		} else {
			backoff = 0
		}
		if !clockwait.Sleep(ctx, r.cfg.Clock, wait) {
			return ctx.Err()
		}
	}
}

// nodeUID returns the UID of node name, for owner references.
func nodeUID(ctx context.Context, client kubeclient.Interface, name string) (types.UID, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if node.UID == "" {
		return "", fmt.Errorf("node %s has no UID", name)
	}
	return node.UID, nil
}

// Back-off of retries after failures: 200ms doubling up to 7s.
const (
	backoffInitial = 200 * time.Millisecond
	backoffMax     = 7 * time.Second
)

func nextBackoff(prev time.Duration) time.Duration {
	if prev <= 0 {
		return backoffInitial
	}
	return min(2*prev, backoffMax)
}
