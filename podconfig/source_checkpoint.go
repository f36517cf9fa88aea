package podconfig

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// Defaults of CheckpointConfig.
const (
	// DefaultCheckpointWait is how long a CheckpointSource waits for the
	// wrapped source's first update before it serves the checkpoint.
	DefaultCheckpointWait = 10 * time.Second
	// DefaultCheckpointReadTimeout bounds each live read of the getters
	// before the checkpointed copy is served.
	DefaultCheckpointReadTimeout = 5 * time.Second
	// DefaultCheckpointRefresh is how often every object the pods reference
	// is read again, so the checkpoint does not keep stale copies of
	// objects nobody read lately.
	DefaultCheckpointRefresh = 5 * time.Minute
)

// minFlushInterval spaces out the checkpoint writes of status-only changes.
const minFlushInterval = time.Second

// ConfigMapGetter reads a ConfigMap; a missing one is an error for which
// apierrors.IsNotFound holds. The same shape as podopts.ConfigMapGetter.
type ConfigMapGetter interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
}

// SecretGetter reads a Secret, with ConfigMapGetter's not-found contract.
// The same shape as podopts.SecretGetter.
type SecretGetter interface {
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// ServiceLister lists the Services of a namespace. The same shape as
// podopts.ServiceLister.
type ServiceLister interface {
	ListServices(ctx context.Context, namespace string) ([]*v1.Service, error)
}

// NodeGetter returns the node's Node object, typically from an informer's
// cache. The same shape as admission.NodeGetter.
type NodeGetter interface {
	Node(ctx context.Context) (*v1.Node, error)
}

// TokenRequester asks the API server for a service account token (the
// TokenRequest API). The same shape as volumemgr.TokenRequester.
type TokenRequester interface {
	CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// CheckpointConfig configures NewCheckpointSource. NodeName is required.
type CheckpointConfig struct {
	// Path is the checkpoint file, e.g. ROOT/pod_checkpoint. Its directory
	// must exist. The file holds Secrets in clear: it is written with mode
	// 0600, and the directory should be private to the agent. Empty means
	// no file: the copies are kept in memory only, so the getters of
	// Objects still serve them through API server outages (as upstream
	// kubelet's informer and watch caches do), but nothing survives a
	// restart.
	Path string
	// NodeName is the node whose pods are checkpointed; a checkpoint of
	// another node is reported and ignored.
	NodeName string
	// Wait is how long Run waits for the wrapped source's first update
	// before it serves the checkpoint (DefaultCheckpointWait if zero).
	Wait time.Duration
	// ConfigMaps, Secrets, Services, Node and Tokens are the live readers
	// the getters of Objects wrap, and that the checkpoint fills itself
	// from. A nil one leaves that kind out.
	ConfigMaps ConfigMapGetter
	Secrets    SecretGetter
	Services   ServiceLister
	Node       NodeGetter
	Tokens     TokenRequester
	// ReadTimeout bounds each live read (DefaultCheckpointReadTimeout if
	// zero); a read that times out is served from the checkpoint.
	ReadTimeout time.Duration
	// RefreshPeriod is how often every referenced object is read again
	// (DefaultCheckpointRefresh if zero).
	RefreshPeriod time.Duration
	// Clock drives Wait, RefreshPeriod and the write spacing (default the
	// real clock).
	Clock clock.WithTicker
	// OnError receives a checkpoint that cannot be used (corrupt, another
	// version, another node) and failed writes, besides the log.
	OnError ErrorHandler
	// SharedPods says the receiver of the updates modifies no pod it is
	// given (a Merger: it never modifies the pods of an update), so the
	// source keeps the pods it forwards instead of a deep copy of each;
	// the wrapped source gives them away, as every source does. False: a
	// copy of each, for a receiver that owns and may change what it gets.
	SharedPods bool
}

// CheckpointSource wraps a node's API source (see NewAPISource) so that the
// node's pods survive API server outages and restarts while the API server
// cannot be reached. It has the wrapped source's name and forwards its
// updates unchanged. It keeps the last-known pods and the ConfigMaps,
// Secrets, Services, service account tokens and Node they use, and
// persists them to one file (WriteCheckpoint: atomic, versioned,
// checksummed, mode 0600) unless CheckpointConfig.Path is empty.
//
// At start it reads the file. If the wrapped source has sent nothing after
// CheckpointConfig.Wait, it sends the checkpointed pods as its first SET, so
// that the agent runs them (even after a host reboot, with no container
// left) and the merger counts the source as seen. When the API server
// answers, the wrapped source's SET replaces that set in the merger like
// any later SET: pods deleted meanwhile are removed, changed ones updated,
// unchanged ones left alone. A file that cannot be used is reported and
// ignored: nothing is sent until the API server answers.
//
// Objects returns the getters that serve the kept objects while the API
// server cannot be reached; wire them wherever ConfigMaps, Secrets,
// Services, tokens or the Node are read.
type CheckpointSource struct {
	inner nodekit.Source
	cfg   CheckpointConfig
	rep   *reporter
	kick  chan struct{}

	writeMu   sync.Mutex // serializes writes
	lastWrite [sha256.Size]byte

	mu   sync.Mutex // guards the fields below
	pods map[types.UID]*v1.Pod
	// live is set once the wrapped source has sent an update: before, the
	// checkpoint is never written (it would lose what the file holds).
	live       bool
	configMaps map[string]*v1.ConfigMap // namespace/name
	secrets    map[string]*v1.Secret    // namespace/name
	services   map[string][]*v1.Service // namespace
	node       *v1.Node
	tokens     map[string]*CheckpointToken // tokenKey
}

var _ nodekit.Source = (*CheckpointSource)(nil)

// NewCheckpointSource returns a checkpointing source around inner, usually
// the API source. Nothing is read or written before Run.
func NewCheckpointSource(inner nodekit.Source, cfg CheckpointConfig) (*CheckpointSource, error) {
	switch {
	case inner == nil:
		return nil, errors.New("podconfig: checkpoint source: the wrapped source is nil")
	case cfg.NodeName == "":
		return nil, errors.New("podconfig: checkpoint source: CheckpointConfig.NodeName is empty")
	case cfg.Wait < 0 || cfg.ReadTimeout < 0 || cfg.RefreshPeriod < 0:
		return nil, errors.New("podconfig: checkpoint source: CheckpointConfig durations must not be negative")
	}
	if cfg.Wait == 0 {
		cfg.Wait = DefaultCheckpointWait
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = DefaultCheckpointReadTimeout
	}
	if cfg.RefreshPeriod == 0 {
		cfg.RefreshPeriod = DefaultCheckpointRefresh
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &CheckpointSource{
		inner: inner, cfg: cfg, rep: newReporter(cfg.OnError), kick: make(chan struct{}, 1),
		pods: map[types.UID]*v1.Pod{}, configMaps: map[string]*v1.ConfigMap{},
		secrets: map[string]*v1.Secret{}, services: map[string][]*v1.Service{}, tokens: map[string]*CheckpointToken{},
	}, nil
}

// Name implements nodekit.Source: the wrapped source's name, so that the
// checkpointed pods and the API server's are one source to the merger.
func (s *CheckpointSource) Name() string { return s.inner.Name() }

// Run implements nodekit.Source. It runs the wrapped source and forwards
// its updates, writing the checkpoint as they come (before forwarding when
// pods were added or removed, within about a second otherwise), and serves
// the checkpoint as described on CheckpointSource. It returns ctx.Err()
// when ctx is done, or the wrapped source's error if it returns first.
func (s *CheckpointSource) Run(ctx context.Context, out chan<- nodekit.PodUpdate) error {
	logger := klog.FromContext(ctx)
	cp := s.load(ctx)

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inner := make(chan nodekit.PodUpdate)
	innerDone := make(chan error, 1)
	wg.Go(func() { innerDone <- s.inner.Run(ctx, inner) })
	wg.Go(func() { s.maintain(ctx) })

	var wait <-chan time.Time
	if cp != nil {
		t := s.cfg.Clock.NewTimer(s.cfg.Wait)
		defer t.Stop()
		wait = t.C()
	}
	send := func(u nodekit.PodUpdate) bool {
		select {
		case out <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-innerDone:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == nil {
				err = errors.New("returned while its context was live")
			}
			return fmt.Errorf("podconfig: checkpoint: source %q: %w", s.inner.Name(), err)
		case <-wait:
			wait = nil
			logger.Info("No pods from the API server yet; running the pods of the checkpoint", "pods", len(cp.Pods), "written", cp.Written, "path", s.cfg.Path)
			if !send(nodekit.PodUpdate{Op: nodekit.SET, Pods: copyPods(cp.Pods), Source: s.Name()}) {
				return ctx.Err()
			}
		case u := <-inner:
			if wait != nil {
				wait = nil
				logger.V(2).Info("The API server answered before the checkpoint was needed")
			}
			if s.apply(u) {
				s.flush(ctx)
			}
			s.wake() // fetch what new pods reference; write status changes
			if !send(u) {
				return ctx.Err()
			}
		}
	}
}

// load reads the checkpoint file into the object store and returns it, or
// nil when there is none or it cannot be used (reported).
func (s *CheckpointSource) load(ctx context.Context) *PodCheckpoint {
	if s.cfg.Path == "" {
		return nil
	}
	logger := klog.FromContext(ctx)
	cp, err := ReadCheckpoint(s.cfg.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		logger.Info("No pod checkpoint yet; pods wait for the API server", "path", s.cfg.Path)
		return nil
	case err != nil:
		s.rep.report(ctx, "checkpoint", fmt.Errorf("%w; ignoring it: pods wait for the API server", err))
		return nil
	case cp.NodeName != s.cfg.NodeName:
		s.rep.report(ctx, "checkpoint", fmt.Errorf("podconfig: checkpoint %s is of node %q, not %q; ignoring it: pods wait for the API server", s.cfg.Path, cp.NodeName, s.cfg.NodeName))
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range cp.ConfigMaps {
		s.configMaps[objectKey(o.Namespace, o.Name)] = o
	}
	for _, o := range cp.Secrets {
		s.secrets[objectKey(o.Namespace, o.Name)] = o
	}
	for _, ns := range cp.ServiceNamespaces {
		s.services[ns] = []*v1.Service{}
	}
	for _, o := range cp.Services {
		s.services[o.Namespace] = append(s.services[o.Namespace], o)
	}
	s.node = cp.Node
	for _, t := range cp.Tokens {
		s.tokens[tokenKey(t.Namespace, t.ServiceAccount, t.Token)] = t
	}
	logger.Info("Read the pod checkpoint", "path", s.cfg.Path, "pods", len(cp.Pods), "written", cp.Written)
	return cp
}

// apply records an update of the wrapped source and reports whether it
// added or removed pods (the checkpoint is then written before the update
// is forwarded, so that a pod that runs is always in it).
func (s *CheckpointSource) apply(u nodekit.PodUpdate) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live = true
	before := len(s.pods)
	added := false
	switch u.Op {
	case nodekit.SET:
		next := make(map[types.UID]*v1.Pod, len(u.Pods))
		for _, p := range u.Pods {
			if p == nil {
				continue
			}
			if _, known := s.pods[p.UID]; !known {
				added = true
			}
			next[p.UID] = s.keep(p)
		}
		s.pods = next
		return added || len(next) != before
	case nodekit.ADD, nodekit.UPDATE, nodekit.DELETE, nodekit.RECONCILE:
		for _, p := range u.Pods {
			if p != nil {
				s.pods[p.UID] = s.keep(p)
			}
		}
	case nodekit.REMOVE:
		for _, p := range u.Pods {
			if p != nil {
				delete(s.pods, p.UID)
			}
		}
	}
	return len(s.pods) != before
}

// keep returns what the source keeps of a pod it forwards: the pod itself
// with CheckpointConfig.SharedPods (a shallow copy of it if it carries
// managedFields, left out), else a deep copy without managedFields.
func (s *CheckpointSource) keep(p *v1.Pod) *v1.Pod {
	if !s.cfg.SharedPods {
		return checkpointCopy(p)
	}
	if p.ManagedFields == nil {
		return p
	}
	c := *p
	c.ManagedFields = nil
	return &c
}

// checkpointCopy is a copy of a pod without its managedFields, which only
// make the file bigger.
func checkpointCopy(p *v1.Pod) *v1.Pod {
	c := p.DeepCopy()
	c.ManagedFields = nil
	return c
}

// maintain writes the checkpoint after status-only changes (at most once
// per second), and reads every referenced object again each RefreshPeriod,
// until ctx is done.
func (s *CheckpointSource) maintain(ctx context.Context) {
	refresh := s.cfg.Clock.NewTicker(s.cfg.RefreshPeriod)
	defer refresh.Stop()
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-refresh.C():
			all = true
		}
		s.fetch(ctx, all)
		s.flush(ctx)
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.Clock.After(minFlushInterval):
		}
	}
}

// fetch reads the objects the pods reference through Objects' getters,
// which store them: the missing ones, or all of them. It does nothing
// before the wrapped source has sent anything (the API server has not
// answered yet).
func (s *CheckpointSource) fetch(ctx context.Context, all bool) {
	s.mu.Lock()
	if !s.live {
		s.mu.Unlock()
		return
	}
	refs := s.refsLocked()
	var cms, secrets, namespaces []string
	for _, k := range refs.configMaps {
		if _, ok := s.configMaps[k]; all || !ok {
			cms = append(cms, k)
		}
	}
	for _, k := range refs.secrets {
		if _, ok := s.secrets[k]; all || !ok {
			secrets = append(secrets, k)
		}
	}
	for _, ns := range refs.serviceNamespaces {
		if _, ok := s.services[ns]; all || !ok {
			namespaces = append(namespaces, ns)
		}
	}
	s.mu.Unlock()

	o := s.Objects()
	for _, k := range cms {
		if s.cfg.ConfigMaps != nil && ctx.Err() == nil {
			ns, name := splitKey(k)
			_, _ = o.GetConfigMap(ctx, ns, name)
		}
	}
	for _, k := range secrets {
		if s.cfg.Secrets != nil && ctx.Err() == nil {
			ns, name := splitKey(k)
			_, _ = o.GetSecret(ctx, ns, name)
		}
	}
	for _, ns := range namespaces {
		if s.cfg.Services != nil && ctx.Err() == nil {
			_, _ = o.ListServices(ctx, ns)
		}
	}
	if s.cfg.Node != nil && ctx.Err() == nil {
		_, _ = o.Node(ctx)
	}
}

// flush writes the checkpoint if it changed since the last write. Failures
// are reported; the next flush tries again.
func (s *CheckpointSource) flush(ctx context.Context) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	cp := s.snapshot() // also forgets what no pod needs
	if cp == nil || s.cfg.Path == "" {
		return
	}
	content, err := json.Marshal(cp) // without the time: what changed is the content
	if err != nil {
		s.rep.report(ctx, "write", fmt.Errorf("podconfig: checkpoint: %w", err))
		return
	}
	sum := sha256.Sum256(content)
	if sum == s.lastWrite {
		return
	}
	cp.Written = metav1.NewTime(s.cfg.Clock.Now().Truncate(time.Second))
	if err := WriteCheckpoint(s.cfg.Path, cp); err != nil {
		s.rep.report(ctx, "write", err)
		return
	}
	if s.rep.clear("write") {
		klog.FromContext(ctx).Info("Writing the pod checkpoint works again", "path", s.cfg.Path)
	}
	s.lastWrite = sum
	klog.FromContext(ctx).V(4).Info("Wrote the pod checkpoint", "path", s.cfg.Path, "pods", len(cp.Pods), "configMaps", len(cp.ConfigMaps), "secrets", len(cp.Secrets))
}

// snapshot is the checkpoint of the current state, holding only the
// objects the pods reference; nil before the wrapped source's first update.
func (s *CheckpointSource) snapshot() *PodCheckpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live {
		return nil
	}
	cp := &PodCheckpoint{NodeName: s.cfg.NodeName, Pods: slices.Collect(maps.Values(s.pods)), Node: s.node}
	sortPods(cp.Pods)
	refs := s.refsLocked()
	for _, k := range refs.configMaps {
		if o, ok := s.configMaps[k]; ok {
			cp.ConfigMaps = append(cp.ConfigMaps, o)
		}
	}
	for _, k := range refs.secrets {
		if o, ok := s.secrets[k]; ok {
			cp.Secrets = append(cp.Secrets, o)
		}
	}
	for _, ns := range refs.serviceNamespaces {
		if list, ok := s.services[ns]; ok {
			cp.ServiceNamespaces = append(cp.ServiceNamespaces, ns)
			cp.Services = append(cp.Services, list...)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.tokens)) {
		if t := s.tokens[k]; s.tokenNeededLocked(t) {
			cp.Tokens = append(cp.Tokens, t)
		}
	}
	// Forget what no pod needs any more: a Secret or token of a deleted pod
	// must not linger on disk.
	keepOnly(s.configMaps, refs.configMaps)
	keepOnly(s.secrets, refs.secrets)
	keepOnly(s.services, refs.serviceNamespaces)
	maps.DeleteFunc(s.tokens, func(_ string, t *CheckpointToken) bool { return !s.tokenNeededLocked(t) })
	return cp
}

// tokenNeededLocked reports whether a checkpointed pod may use the token:
// one of its service account, and bound to it if bound to a pod.
func (s *CheckpointSource) tokenNeededLocked(t *CheckpointToken) bool {
	if ref := t.Token.Spec.BoundObjectRef; ref != nil && ref.Kind == "Pod" {
		p, ok := s.pods[ref.UID]
		return ok && p.Namespace == t.Namespace && serviceAccountOf(p) == t.ServiceAccount
	}
	for _, p := range s.pods {
		if p.Namespace == t.Namespace && serviceAccountOf(p) == t.ServiceAccount {
			return true
		}
	}
	return false
}

func serviceAccountOf(p *v1.Pod) string {
	if p.Spec.ServiceAccountName == "" {
		return "default"
	}
	return p.Spec.ServiceAccountName
}

func keepOnly[T any](m map[string]T, keys []string) {
	keep := make(map[string]bool, len(keys))
	for _, k := range keys {
		keep[k] = true
	}
	maps.DeleteFunc(m, func(k string, _ T) bool { return !keep[k] })
}

// refs are the objects the checkpointed pods need, sorted.
type refs struct {
	configMaps, secrets, serviceNamespaces []string
}

func (s *CheckpointSource) refsLocked() refs {
	cms, secrets, namespaces := map[string]bool{}, map[string]bool{}, map[string]bool{metav1.NamespaceDefault: true}
	for _, p := range s.pods {
		podObjectRefs(p, cms, secrets)
		if p.Spec.EnableServiceLinks == nil || *p.Spec.EnableServiceLinks {
			namespaces[p.Namespace] = true
		}
	}
	return refs{
		configMaps:        slices.Sorted(maps.Keys(cms)),
		secrets:           slices.Sorted(maps.Keys(secrets)),
		serviceNamespaces: slices.Sorted(maps.Keys(namespaces)),
	}
}
