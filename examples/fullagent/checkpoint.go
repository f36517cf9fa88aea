package main

// Offline autonomy: the pod checkpoint (--pod-checkpoint) and what lets the
// agent start while the API server cannot be reached.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/podconfig"
	"github.com/nodekit/nodekit/podopts"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/volumemgr"
)

// nodeCacheSyncTimeout bounds the wait for the node informer at start: an
// agent started while the API server is down goes on with the checkpointed
// (or a locally built) Node instead of waiting for it.
const nodeCacheSyncTimeout = 10 * time.Second

// checkpointPath is where --pod-checkpoint keeps the checkpoint: in the
// root dir, beside upstream's other state files (cpu_manager_state, ...).
func checkpointPath(rootDir string) string { return filepath.Join(rootDir, "pod_checkpoint") }

// objectGetter reads the ConfigMaps, Secrets and Services pods use
// (environment, volumes, image pull secrets).
type objectGetter interface {
	podopts.ConfigMapGetter
	podopts.SecretGetter
	podopts.ServiceLister
}

var _ objectGetter = (*podconfig.CheckpointObjects)(nil)

// apiSource is the API server as a pod source, wrapped in a
// podconfig.CheckpointSource: it keeps the ConfigMaps, Secrets, Services,
// tokens and Node the pods use, so that containers still (re)start during
// an API server outage (the role upstream's informer and watch caches
// play). With --pod-checkpoint it also persists them with the
// pods to ROOT/pod_checkpoint, so that pods come back when the agent
// starts while the API server is unreachable.
func (a *agent) apiSource(o *options) (nodekit.Source, error) {
	a.localLabels = o.nodeLabels
	path := ""
	if o.podCheckpoint {
		path = checkpointPath(o.rootDir)
	}
	live := podopts.FromClient(a.client)
	// Services from an informer's cache, as kubelet's service lister
	// (live LISTs only until it has synced): no LIST per pod start.
	if a.apiInformer == nil {
		a.apiInformer = newAPIInformers(a.client)
	}
	svc := a.apiInformer.services
	services := informerServices{lister: corelisters.NewServiceLister(svc.GetIndexer()), synced: svc.HasSynced, live: live}
	// ConfigMaps and Secrets are watched one object at a time, as
	// upstream's default (configMapAndSecretChangeDetectionStrategy:
	// Watch): volume refreshes send no requests for unchanged objects.
	a.watching = volumemgr.NewWatching(a.client, clock.RealClock{})
	cp, err := podconfig.NewCheckpointSource(podconfig.NewAPISource(a.client, a.nodeName), podconfig.CheckpointConfig{
		Path: path, NodeName: a.nodeName,
		ConfigMaps: a.watching, Secrets: a.watching, Services: services,
		Tokens: volumemgr.FromClient(a.client),
		Node:   admission.NodeFunc(a.cachedNode),
		// Its receiver is the merger, which modifies no pod it is given.
		SharedPods: true,
	})
	if err != nil {
		return nil, fmt.Errorf("pod checkpoint: %w", err)
	}
	a.checkpoint = cp
	return cp, nil
}

// objects reads ConfigMaps, Secrets and Services from the API server
// through the API source's checkpoint, which serves its copies while the
// API server is unreachable. Wire it wherever pods' objects are read
// (environment, image pull secrets). Nil when standalone.
func (a *agent) objects() objectGetter {
	if a.checkpoint == nil {
		return nil
	}
	return a.checkpoint.Objects()
}

// volumeSources are the volume manager's readers of ConfigMaps and Secrets
// and its service account token requester, through the API source's
// checkpoint (which also serves the last tokens while the API server is
// unreachable).
func (a *agent) volumeSources() (volumemgr.ObjectGetter, volumemgr.TokenRequester) {
	if a.checkpoint == nil {
		vc := volumemgr.FromClient(a.client)
		return vc, vc
	}
	o := a.checkpoint.Objects()
	return o, o
}

// cachedNode is this node's Node from the node informer's cache.
func (a *agent) cachedNode(context.Context) (*v1.Node, error) {
	if a.nodeInformer == nil {
		return nil, errors.New("no node informer")
	}
	return corelisters.NewNodeLister(a.nodeInformer.GetIndexer()).Get(a.nodeName)
}

// informerNode is this node's Node from the node informer's cache, once
// the informer has synced; for statusmgr.NodeConfig.Cached.
func (a *agent) informerNode() (*v1.Node, bool) {
	if a.nodeInformer == nil || !a.nodeInformer.HasSynced() {
		return nil, false
	}
	n, err := a.cachedNode(context.Background())
	return n, err == nil
}

// admissionNode is the Node admission checks pods against: from the
// informer's cache; while that does not have it (the API server has not
// answered since the start) the checkpointed Node (with --pod-checkpoint),
// else one built from this machine, as upstream kubelet's getNodeAnyWay.
func (a *agent) admissionNode(ctx context.Context, machine statusmgr.MachineInfo) (*v1.Node, error) {
	if n, err := a.cachedNode(ctx); err == nil {
		return n, nil
	}
	if a.checkpoint != nil {
		if n, err := a.checkpoint.Objects().Node(ctx); err == nil {
			return n, nil
		}
	}
	return a.localNode(ctx, machine)
}

// localNode is the Node the agent would register, built from the machine:
// its own labels, the registration taints, allocatable = capacity -
// reserved, and the runtime's features and handlers (as upstream's
// initialNode runs the node status setters), so that a Strict
// supplementalGroupsPolicy pod admitted before the API server answers is
// judged by what the runtime supports.
func (a *agent) localNode(ctx context.Context, machine statusmgr.MachineInfo) (*v1.Node, error) {
	m, err := machine.Machine(ctx)
	if err != nil {
		return nil, err
	}
	node := &v1.Node{}
	node.Name = a.nodeName
	node.Labels = map[string]string{
		v1.LabelHostname: a.nodeName, v1.LabelOSStable: runtime.GOOS, v1.LabelArchStable: runtime.GOARCH,
	}
	for k, v := range a.localLabels {
		node.Labels[k] = v
	}
	node.Spec.Taints = append([]v1.Taint(nil), a.cfg.RegisterWithTaints...)
	node.Status.Capacity = v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(m.NumCores), resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(int64(m.MemoryBytes), resource.BinarySI),
		v1.ResourcePods:   *resource.NewQuantity(int64(a.cfg.MaxPods), resource.DecimalSI),
	}
	node.Status.Allocatable = node.Status.Capacity.DeepCopy()
	for name, q := range reserved(a.cfg) {
		if have, ok := node.Status.Allocatable[name]; ok {
			have.Sub(q)
			node.Status.Allocatable[name] = have
		}
	}
	if err := a.runtime.SetNodeStatus(ctx, node); err != nil {
		// The node then declares no runtime features: Strict pods are
		// refused until the runtime answers, never run without support.
		klog.FromContext(ctx).Error(err, "Node features unknown for admission", "node", a.nodeName)
	}
	return node, nil
}

// register registers the node; while the API server cannot be reached it
// logs and lets the node status loop register it later, so pods (static
// ones, checkpointed ones) do not wait for the API server.
func (a *agent) register(ctx context.Context) {
	if err := a.node.Register(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Unable to register the node; the node status loop keeps trying", "node", a.nodeName)
	}
}

// waitNodeCache waits, for at most nodeCacheSyncTimeout, for the node
// informer's first list; admission falls back (admissionNode) meanwhile.
func (a *agent) waitNodeCache(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, nodeCacheSyncTimeout)
	defer cancel()
	synced := a.nodeInformer.HasSynced
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		klog.FromContext(ctx).Info("The API server has not listed the Node yet; admitting pods against the checkpointed or local Node meanwhile", "node", a.nodeName)
	}
}

// informerServices lists Services from the API informer's cache once it
// has synced, as kubelet reads them from its service informer, and from
// the API server (live) before that. The Services it returns are the
// cache's: callers must not change them.
type informerServices struct {
	lister corelisters.ServiceLister
	synced cache.InformerSynced
	live   podopts.ServiceLister
}

func (s informerServices) ListServices(ctx context.Context, namespace string) ([]*v1.Service, error) {
	if !s.synced() {
		return s.live.ListServices(ctx, namespace)
	}
	return s.lister.Services(namespace).List(labels.Everything())
}

// apiInformers are the agent's cluster-wide informers (Services,
// RuntimeClasses), their objects kept without managedFields. They are
// made one by one on kubeclient rather than by client-go's
// SharedInformerFactory, which reaches the informers of every API group
// and so links all of them into the binary.
type apiInformers struct {
	services cache.SharedIndexInformer
	classes  cache.SharedIndexInformer
}

func newAPIInformers(c kubeclient.Interface) *apiInformers {
	namespaced := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	s := &apiInformers{
		services: cache.NewSharedIndexInformer(kubeclient.ListWatch(c, c.CoreV1().Services(metav1.NamespaceAll), nil), &v1.Service{}, 0, namespaced),
		classes:  cache.NewSharedIndexInformer(kubeclient.ListWatch(c, c.NodeV1().RuntimeClasses(), nil), &nodev1.RuntimeClass{}, 0, cache.Indexers{}),
	}
	for _, inf := range []cache.SharedIndexInformer{s.services, s.classes} {
		_ = inf.SetTransform(dropManagedFields) // fails only once started
	}
	return s
}

// Start runs the informers until stop is closed; call it once.
func (s *apiInformers) Start(stop <-chan struct{}) {
	go s.services.Run(stop)
	go s.classes.Run(stop)
}

func dropManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
