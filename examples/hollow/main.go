// Command hollow is a hollow node agent, as kubemark's hollow kubelet: it
// joins a cluster as a node and runs the real pod source (API server),
// sync loop, PLEG (pleg.New: evented over the fake runtime's events),
// status manager (pod statuses, the Node with its Ready condition, the
// Lease), admission chain and container GC — on
// agenttest's in-memory fake runtime instead of containerd. Pods bound to
// the node become Running with fake containers and IPs; nothing runs.
//
//	go run ./examples/hollow --kubeconfig node.kubeconfig --hostname-override hollow-1
//
// It does not touch the machine: no cgroups, no CNI, no volumes, no node
// API server (:10250), no events; its machine (4 CPUs, 16 GiB) is made up.
// Its only files are pod directories under --root-dir (default a temporary
// directory, removed at exit). Many of them on one machine put an API
// server under the load of a large cluster (hack/scale).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/gc"
	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/podconfig"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
)

// options are the command-line flags, named as kubelet's.
type options struct {
	kubeconfig, nodeName, nodeIP, rootDir string
	maxPods, burst                        int
	qps                                   float64
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the node's identity (required)")
	flag.StringVar(&o.nodeName, "hostname-override", "", "node name (default: the hostname)")
	flag.StringVar(&o.nodeIP, "node-ip", "198.18.0.1", "the node's InternalIP and the pods' hostIP; nothing listens there")
	flag.IntVar(&o.maxPods, "max-pods", 110, "pods capacity")
	flag.StringVar(&o.rootDir, "root-dir", "", "directory of the pod directories (default: a temporary one, removed at exit)")
	flag.Float64Var(&o.qps, "kube-api-qps", 5, "API requests per second")
	flag.IntVar(&o.burst, "kube-api-burst", 10, "API request burst")
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if err := run(ctx, o); err != nil && !errors.Is(err, context.Canceled) {
		klog.Background().Error(err, "hollow node failed")
		klog.Flush()
		os.Exit(1)
	}
}

// run wires the hollow node and runs it until ctx is done; it returns once
// every part has stopped.
func run(ctx context.Context, o options) error {
	name, client, err := connect(o)
	if err != nil {
		return err
	}
	if o.rootDir == "" {
		if o.rootDir, err = os.MkdirTemp("", "hollow-"+name+"-"); err != nil {
			return err
		}
		defer os.RemoveAll(o.rootDir)
	}
	h, err := newHollowNode(client, name, o)
	if err != nil {
		return err
	}
	return h.run(ctx)
}

// connect resolves the node's name and makes its API client from the
// kubeconfig, at the flags' request rate.
func connect(o options) (string, kubeclient.Interface, error) {
	name := o.nodeName
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", nil, fmt.Errorf("--hostname-override: %w", err)
		}
		name = strings.ToLower(h)
	}
	if o.kubeconfig == "" {
		return "", nil, errors.New("--kubeconfig is required")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return "", nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst, rc.UserAgent = float32(o.qps), o.burst, "nodekit-hollow/"+name
	client, err := kubeclient.New(rc, nil)
	if err != nil {
		return "", nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	return name, client, nil
}

// hollowNode is a hollow node's parts, wired.
type hollowNode struct {
	name         string
	pods         *podconfig.Merger
	nodeInformer toolscache.SharedIndexInformer
	nodes        corelisters.NodeLister
	loop         *syncloop.Loop
	// background are the parts that run from the start: the PLEG, the
	// status manager, the Node status, the Lease and container GC.
	background []func(context.Context) error
}

// newHollowNode builds the parts in order: the runtime side (fake
// runtime, PLEG), the Node informer, the pod store and the status
// manager, the node side (Node status, Lease), then the loop and GC.
func newHollowNode(client kubeclient.Interface, name string, o options) (*hollowNode, error) {
	rt := agenttest.NewFakeRuntime(clock.RealClock{})
	h := &hollowNode{name: name, pods: podconfig.New([]nodekit.Source{podconfig.NewAPISource(client, name)}, podconfig.WithSharedPods())}
	cache := pleg.NewCache()
	lifecycle := pleg.New(rt, cache, pleg.Options{}) // evented when rt streams container events
	// One watch on this Node feeds admission and the node status.
	// Built from the Node informer alone, not a SharedInformerFactory,
	// which would link every API group's informers and listers; on
	// kubeclient, which links only the groups a node agent uses.
	h.nodeInformer = toolscache.NewSharedIndexInformer(kubeclient.ListWatch(client, client.CoreV1().Nodes(), func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}), &v1.Node{}, 0, toolscache.Indexers{})
	h.nodes = corelisters.NewNodeLister(h.nodeInformer.GetIndexer())
	// The pod store is built first: the loop fills it, the status manager reads it.
	store := syncloop.NewPodStore()
	status, err := statusmgr.NewManager(statusmgr.Config{Sink: statusmgr.NewAPISink(client),
		Pods: store, SharePods: true})
	if err != nil {
		return nil, err
	}
	node, lease, err := h.nodeSide(client, o, lifecycle)
	if err != nil {
		return nil, err
	}
	h.loop, err = syncloop.New(syncloop.Config{
		Runtime: rt, Pods: store, Cache: cache, Status: status, Updates: h.pods.Updates(),
		SourcesReady: h.pods.SeenAllSources, Events: lifecycle.Events(),
		Health:    func(context.Context) error { return lifecycle.Healthy() },
		Admitters: admission.Builtins(admission.NodeFunc(func(context.Context) (*v1.Node, error) { return h.nodes.Get(name) })),
		Probes:    allProbesSucceed{}, // no prober: every probe passes, as kubemark's
		RootDir:   o.rootDir, NodeIPs: []string{o.nodeIP},
	})
	if err != nil {
		return nil, err
	}
	containerGC, err := gc.NewContainerGC(gc.ContainerGCConfig{Policy: gc.ContainerPolicy{MaxPerPodContainer: 1, MaxContainers: -1},
		SourcesReady: h.loop.SourcesReady}, rt, h.loop)
	if err != nil {
		return nil, err
	}
	h.background = []func(context.Context) error{lifecycle.Run, status.Run, node.Run, lease.Run, containerGC.Run}
	return h, nil
}

// nodeSide is the Node's reporter (the fake machine, Ready while the
// PLEG is healthy) and its Lease heartbeat.
func (h *hollowNode) nodeSide(client kubeclient.Interface, o options, lifecycle pleg.PLEG) (*statusmgr.NodeReporter, *statusmgr.Heartbeat, error) {
	name := h.name
	lease, err := statusmgr.NewHeartbeat(client, statusmgr.HeartbeatConfig{NodeName: name})
	if err != nil {
		return nil, nil, err
	}
	node, err := statusmgr.NewNodeReporter(client, statusmgr.NodeConfig{
		NodeName: name, NodeIP: o.nodeIP, MaxPods: o.maxPods, Labels: map[string]string{"nodekit.io/hollow": "true"},
		Machine: statusmgr.MachineInfoFunc(func(context.Context) (statusmgr.Machine, error) { return fakeMachine(name), nil }),
		Runtime: fakeVersion{}, Conditions: map[v1.NodeConditionType]statusmgr.ConditionProvider{
			v1.NodeReady: statusmgr.ReadyCondition(statusmgr.ReadinessFunc(func(context.Context) error { return lifecycle.Healthy() })),
		},
		Cached: statusmgr.CachedUnlessFailing(func() (*v1.Node, bool) { n, err := h.nodes.Get(name); return n, err == nil }, lease, statusmgr.CacheDistrust),
	})
	if err != nil {
		return nil, nil, err
	}
	return node, lease, nil
}

// run runs the parts until ctx is done: the background parts and the Node
// informer at once, the pod source and the loop once the Node is
// registered. It returns once every part has stopped.
func (h *hollowNode) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, part := range h.background {
		wg.Go(func() { _ = part(ctx) })
	}
	wg.Go(func() { h.nodeInformer.RunWithContext(ctx) })
	// Admission needs the Node: start taking pods once it is registered.
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := h.nodes.Get(h.name)
		return err == nil, nil
	}); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Hollow node registered", "node", h.name)
	wg.Go(func() { _ = h.pods.Run(ctx) })
	return h.loop.Run(ctx)
}

// fakeMachine is the made-up machine of a hollow node.
func fakeMachine(name string) statusmgr.Machine {
	return statusmgr.Machine{
		NumCores: 4, MemoryBytes: 16 << 30, EphemeralStorageBytes: 100 << 30,
		MachineID: "hollow-" + name, SystemUUID: "hollow-" + name, BootID: "hollow-" + name,
		KernelVersion: "hollow", OSImage: "nodekit hollow node",
	}
}

// fakeVersion is the fake runtime's status.nodeInfo.containerRuntimeVersion.
type fakeVersion struct{}

func (fakeVersion) Version(context.Context) (string, error) { return "fake://0.0.0", nil }

// allProbesSucceed answers every liveness, readiness and startup probe with
// success, so pods with probes become ready and are never restarted.
type allProbesSucceed struct{}

func (allProbesSucceed) Result(syncloop.ProbeKind, nodekit.ContainerID) (syncloop.ProbeResult, bool) {
	return syncloop.ProbeSuccess, true
}

var (
	_ statusmgr.RuntimeVersioner = fakeVersion{}
	_ syncloop.ProbeResults      = allProbesSucceed{}
)
