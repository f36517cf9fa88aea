package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/tracing"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/allocation"
	"github.com/nodekit/nodekit/bootstrap"
	"github.com/nodekit/nodekit/cgroupmgr"
	"github.com/nodekit/nodekit/cgroupmgr/oomwatch"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/devicemgr"
	"github.com/nodekit/nodekit/dra"
	"github.com/nodekit/nodekit/events"
	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/logs"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/pluginwatcher"
	"github.com/nodekit/nodekit/podconfig"
	"github.com/nodekit/nodekit/podresources"
	"github.com/nodekit/nodekit/probes"
	"github.com/nodekit/nodekit/pullrecords"
	"github.com/nodekit/nodekit/runtimecache"
	"github.com/nodekit/nodekit/server"
	"github.com/nodekit/nodekit/shutdown"
	"github.com/nodekit/nodekit/stats"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
	"github.com/nodekit/nodekit/volumemgr"
)

// agent is every part of a running fullagent, wired.
type agent struct {
	nodeName string
	cfg      *kubeletv1beta1.KubeletConfiguration
	gates    featuregate.FeatureGate // kubelet v1.37's gates as configured
	// declared is status.declaredFeatures and declaredAdmit refuses pods
	// needing others (declaredfeatures.go); nil with the gate off.
	declared      []string
	declaredAdmit nodekit.Admitter
	declaredFeat  *admission.DeclaredFeatures // the same admitter, for pod updates
	resizeMetrics *allocation.Metrics         // in-place resize series; also counts resizes in pod updates
	client        kubeclient.Interface        // nil when standalone
	runtime       *criruntime.Runtime
	pullRecords   *pullrecords.Verifier // KubeletEnsureSecretPulledImages; nil when off
	merger        *podconfig.Merger
	pleg          pleg.PLEG
	status        *statusmgr.Manager
	probes        *probes.Manager
	volumes       *volumemgr.Manager
	rootDir       string
	systemBus     string             // the system D-Bus address ("" is the default): systemd driver, logind
	pods          *syncloop.PodStore // built first; the loop fills it
	loop          *syncloop.Loop
	node          *statusmgr.NodeReporter
	lease         *statusmgr.Heartbeat
	nodeInformer  cache.SharedIndexInformer // this node's Node
	events        *events.Broadcaster
	// checkpoint wraps the API source: it keeps the objects pods use
	// through outages, and persists them with --pod-checkpoint.
	checkpoint *podconfig.CheckpointSource
	// listing serves the PLEG's last listing to the periodic readers
	// that can take one a moment old (housekeeping, the pod cgroup
	// clean-up); container GC and stats ask the runtime, as upstream.
	listing *runtimecache.Cache
	// localLabels are --node-labels, for a Node built locally (offline).
	localLabels map[string]string
	api         *server.Server         // the node API (:10250)
	healthz     *server.HealthzServer  // 127.0.0.1:10248/healthz; nil with healthzPort 0
	stats       *stats.Provider        // /stats/summary
	apiCert     *server.CSRCertificate // nil unless serverTLSBootstrap
	metrics     *agentMetrics          // the registries, and what the parts report into (metrics.go)
	reclaim     *reclaim               // container GC, image GC, eviction (reclaim.go)
	resources   *resources             // CPU, memory and topology managers (resources.go)
	logRotation *logs.Manager          // containerLogMaxSize/MaxFiles
	cgroups     *podCgroups            // kubepods, pod cgroups, OOM scores (cgroups.go)
	resizer     *allocation.Manager    // in-place resize (resize.go)
	classes     *runtimeClasses        // runtimeClassName -> handler (runtimeclass.go)
	oom         *oomwatch.Watcher      // SystemOOM node events from the kernel log
	devices     *devicemgr.Manager     // device plugins (devices.go)
	plugins     *pluginwatcher.Watcher // CSI and DRA plugin registration (plugins.go)
	csi         *csiParts              // CSI drivers and the CSI volume plugin (csi.go); nil when standalone
	podRes      *podresources.Server   // the podresources API (podresources.go)
	dra         *dra.Manager           // DRA claims (dra.go); nil when standalone or the runtime has no CDI
	probeRelay  *probes.Relay          // probe results to the status manager and the loop
	certRotator *bootstrap.Rotator     // client certificate rotation (bootstrap.go)
	watching    *volumemgr.Watching    // ConfigMaps and Secrets of volumes, watched
	shutdown    *shutdown.Manager      // graceful node shutdown (logind and SIGPWR)
	// shutdownGrace is the total shutdown grace period (logind's
	// InhibitDelayMaxSec must be at least this).
	shutdownGrace time.Duration
	apiInformer   *apiInformers
	// tracer is the tracing block's provider (tracing.go), handed to the
	// CRI runtime, the loop and the API clients; nil without tracing.
	tracer tracing.TracerProvider
}

// newAgent builds the agent from the options and the loaded, validated
// configuration (loadConfig) and its feature gates, in layers: the agent's
// base (node name, metrics, API clients), the runtime side, the pod side
// and the node side (layers.go). Each layer hands the next what it needs.
func newAgent(ctx context.Context, o *options, cfg *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) (_ *agent, err error) {
	a, recorder, err := newAgentBase(ctx, o, cfg, gates)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			a.stopTracing(ctx)
		}
	}()
	cache, err := a.newRuntimeSide(ctx, o, recorder)
	if err != nil {
		return nil, err
	}
	h, err := a.newPodSide(ctx, o, recorder, cache)
	if err != nil {
		return nil, err
	}
	if err := a.newNodeSide(ctx, o, h); err != nil {
		return nil, err
	}
	return a, nil
}

// newAgentBase checks the node-level options, sets the kernel tunables and
// builds the agent's metrics and, with --kubeconfig, its API clients. It
// returns the agent and the event recorder every later part reports to (a
// fake one when standalone).
func newAgentBase(ctx context.Context, o *options, cfg *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) (*agent, *events.Recorder, error) {
	logger := klog.FromContext(ctx)
	nodeName, err := nodeNameOf(o.hostnameOverride)
	if err != nil {
		return nil, nil, err
	}
	if o.nodeIP != "" && net.ParseIP(o.nodeIP) == nil {
		return nil, nil, fmt.Errorf("--node-ip: %q is not an IP address", o.nodeIP)
	}
	if err := os.MkdirAll(o.rootDir, 0o750); err != nil {
		return nil, nil, fmt.Errorf("--root-dir: %w", err)
	}
	if err := kernelTunables(ctx, cfg, gates); err != nil {
		return nil, nil, err
	}
	a := &agent{nodeName: nodeName, cfg: cfg, gates: gates, rootDir: o.rootDir, systemBus: o.systemBus}
	if a.tracer, err = newTracerProvider(ctx, cfg.Tracing, nodeName); err != nil {
		return nil, nil, err
	}
	declared, declaredAdmit, err := a.declaredFeatures()
	if err != nil {
		return nil, nil, err
	}
	if declaredAdmit != nil {
		a.declared, a.declaredAdmit, a.declaredFeat = declared, declaredAdmit, declaredAdmit
	}
	if a.metrics, err = newAgentMetrics(nodeName, time.Now()); err != nil {
		return nil, nil, err
	}
	logger = logger.WithValues("node", nodeName)

	if o.kubeconfig == "" {
		if err := checkStandaloneAuth(cfg); err != nil {
			return nil, nil, err
		}
		logger.Info("No --kubeconfig: running standalone, static pods only")
		// As kubelet without an API server: events are logged, not sent.
		sch, err := kubeclient.NewScheme()
		if err != nil {
			return nil, nil, err
		}
		a.events = events.NewBroadcaster(ctx, nil)
		return a, a.events.NewRecorder(sch.Runtime(), v1.EventSource{Component: "kubelet", Host: a.nodeName}), nil
	}
	recorder, err := a.connect(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	return a, recorder, nil
}

// connect builds the API client (--kubeconfig, kubeAPIQPS/Burst) and the
// event broadcaster with its own client, and returns the recorder.
func (a *agent) connect(ctx context.Context, o *options) (*events.Recorder, error) {
	cfg := a.cfg
	rc, err := a.clientConfig(ctx, o)
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "nodekit-fullagent/" + a.nodeName
	rc.ContentType = cfg.ContentType
	if a.tracer != nil {
		rc.Wrap(tracing.WrapperFor(a.tracer)) // a client span per API request, as kubelet's
	}
	// Events get a client of their own, limited by eventRecordQPS
	// and eventBurst, as kubelet's.
	ec := rest.CopyConfig(rc)
	ec.QPS, ec.Burst = float32(*cfg.EventRecordQPS), int(cfg.EventBurst)
	rc.QPS, rc.Burst = float32(*cfg.KubeAPIQPS), int(cfg.KubeAPIBurst)
	// kubeclient, not client-go's clientset: the clientset links every
	// API group into the binary (kubeclient/doc.go).
	sch, err := kubeclient.NewScheme()
	if err != nil {
		return nil, err
	}
	cs, err := kubeclient.New(rc, sch)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	eventClient, err := kubeclient.New(ec, sch)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	a.client = cs
	a.events = events.NewBroadcaster(ctx, kubeclient.EventSink(ctx, eventClient))
	return a.events.NewRecorder(sch.Runtime(), v1.EventSource{Component: "kubelet", Host: a.nodeName}), nil
}

// kernelTunables is kubelet's start-up handling of the kernel tunables it
// needs: with protectKernelDefaults it refuses to start when one differs
// from its value; without (the default), it sets each that differs, and
// fails to start when it cannot, unless it runs in a user namespace with
// the KubeletInUserNamespace gate (on by default), as kubelet.
func kernelTunables(ctx context.Context, cfg *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) error {
	if cfg.ProtectKernelDefaults {
		if err := cgroupmgr.CheckKernelDefaults("/proc/sys"); err != nil {
			return fmt.Errorf("protectKernelDefaults: %w", err)
		}
		return nil
	}
	skip := gates.Enabled("KubeletInUserNamespace") && cgroupmgr.InUserNamespace("/proc/self")
	if err := cgroupmgr.SetKernelDefaults(ctx, "/proc/sys", skip); err != nil {
		return fmt.Errorf("protectKernelDefaults: false: kernel tunables: %w", err)
	}
	return nil
}

// sysctlAdmitter allows the kernel's safe sysctls and allowedUnsafeSysctls.
func sysctlAdmitter(cfg *kubeletv1beta1.KubeletConfiguration) (*admission.Sysctls, error) {
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return nil, fmt.Errorf("kernel version: %w", err)
	}
	s, err := admission.NewSysctls(append(admission.SafeSysctls(strings.TrimSpace(string(release))), cfg.AllowedUnsafeSysctls...))
	if err != nil {
		return nil, fmt.Errorf("allowedUnsafeSysctls: %w", err)
	}
	return s, nil
}

// nodeConditions are Ready and the pressure conditions.
func (a *agent) nodeConditions() map[v1.NodeConditionType]statusmgr.ConditionProvider {
	out := a.reclaim.conditions()
	out[v1.NodeReady] = readyCondition(a.runtime, a.pleg, a.shutdown)
	return out
}

// nodeGetter gives admission the node: the Node object from the API
// server (a watch on this node only), or one built from the machine when
// standalone.
func (a *agent) nodeGetter(ctx context.Context, machine statusmgr.HostMachine) (admission.NodeGetter, error) {
	if a.client == nil {
		m, err := machine.Machine(ctx)
		if err != nil {
			return nil, err
		}
		node := &v1.Node{}
		node.Name = a.nodeName
		node.Labels = map[string]string{v1.LabelHostname: a.nodeName, v1.LabelOSStable: "linux"}
		node.Status.Allocatable = v1.ResourceList{
			v1.ResourceCPU:    *resource.NewQuantity(int64(m.NumCores), resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(int64(m.MemoryBytes), resource.BinarySI),
			v1.ResourcePods:   *resource.NewQuantity(int64(a.cfg.MaxPods), resource.DecimalSI),
		}
		return admission.NodeFunc(func(ctx context.Context) (*v1.Node, error) {
			n := node.DeepCopy()
			_ = a.runtime.SetNodeStatus(ctx, n) // features.supplementalGroupsPolicy
			return n, nil
		}), nil
	}
	// One informer, not a SharedInformerFactory: the factory reaches the
	// informers of every API group and links them all into the binary.
	a.nodeInformer = cache.NewSharedIndexInformer(kubeclient.ListWatch(a.client, a.client.CoreV1().Nodes(), func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.nodeName).String()
	}), &v1.Node{}, 0, cache.Indexers{})
	// The cached Node, else (offline start) the checkpointed or a local one.
	return admission.NodeFunc(func(ctx context.Context) (*v1.Node, error) { return a.admissionNode(ctx, machine) }), nil
}

// nodeAllocatable is the machine's cpu, memory and ephemeral storage less
// the reservations.
func nodeAllocatable(ctx context.Context, machine statusmgr.MachineInfo, reserved v1.ResourceList) (v1.ResourceList, error) {
	m, err := machine.Machine(ctx)
	if err != nil {
		return nil, fmt.Errorf("machine info: %w", err)
	}
	out := v1.ResourceList{
		v1.ResourceCPU:              *resource.NewQuantity(int64(m.NumCores), resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(int64(m.MemoryBytes), resource.BinarySI),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(int64(m.EphemeralStorageBytes), resource.BinarySI),
	}
	for name, q := range reserved {
		if cur, ok := out[name]; ok {
			cur.Sub(q)
			out[name] = cur
		}
	}
	return out, nil
}

// reserved is kubeReserved + systemReserved, subtracted from capacity.
func reserved(cfg *kubeletv1beta1.KubeletConfiguration) v1.ResourceList {
	out := v1.ResourceList{}
	for _, m := range []map[string]string{cfg.KubeReserved, cfg.SystemReserved} {
		for k, v := range m {
			q := resource.MustParse(v) // validated by loadConfig
			if cur, ok := out[v1.ResourceName(k)]; ok {
				q.Add(cur)
			}
			out[v1.ResourceName(k)] = q
		}
	}
	return out
}

// run starts every part (the node-facing ones, then the pod-facing ones)
// and the loop in one run group, and blocks until the agent's context
// ends, a part fails or the loop ends; then it waits for every part to
// return, stops the event broadcaster and closes the runtime.
func (a *agent) run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	sdNotify, err := newSystemdNotify(os.Getenv, os.Getpid(), a.loop.Healthy)
	if err != nil {
		return err
	}
	g := newRunGroup(ctx)
	err = a.startParts(g.ctx, g, sdNotify)
	if err != nil {
		g.stop(err)
	}
	runErr := g.wait()
	logger.Info("fullagent stopped", "cause", runErr)
	if a.events != nil {
		a.events.Shutdown()
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = a.runtime.Close(shutdownCtx)
	switch {
	case err != nil:
		return err // a part could not start
	case ctx.Err() != nil:
		return nil // stopped: the agent's context ended
	}
	return runErr
}

// startParts starts the node side, the pod side, the loop and the systemd
// watchdog in g. The loop ending (its update stream closed) ends the
// group.
func (a *agent) startParts(ctx context.Context, g *runGroup, sdNotify *systemdNotify) error {
	a.startNodeSide(ctx, g.start)
	if err := a.startPodSide(ctx, g.start); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("fullagent running", "runtime", a.cfg.ContainerRuntimeEndpoint, "staticPodPath", a.cfg.StaticPodPath)
	g.start("sync loop", func(ctx context.Context) error {
		err := a.loop.Run(ctx)
		if err == nil && ctx.Err() == nil {
			g.stop(errors.New("sync loop: its pod update stream ended"))
		}
		return err
	})
	sdNotify.ready(ctx, g.start)
	return nil
}

// starter runs a part in the agent's group under a name its error carries.
type starter = func(name string, f func(context.Context) error)

// startNodeSide relists once, registers the node and starts its status,
// Lease, informers, certificates, the node API, healthz and the status
// manager.
func (a *agent) startNodeSide(ctx context.Context, start starter) {
	// One relist before registering, so the node's first status can
	// already say Ready (the PLEG is healthy once it has relisted).
	a.pleg.Relist(ctx)
	if a.node != nil {
		a.register(ctx) // not fatal: the API server may be unreachable
		start("node status", a.node.Run)
		start("lease", a.lease.Run)
	}
	if a.apiInformer != nil {
		a.apiInformer.Start(ctx.Done()) // not waited for: the API server may be down
	}
	if a.nodeInformer != nil {
		go a.nodeInformer.Run(ctx.Done())
		a.waitNodeCache(ctx) // bounded: the API server may be unreachable
	}
	if a.apiCert != nil {
		start("serving certificate", a.apiCert.Run)
	}
	if a.certRotator != nil {
		start("client certificate rotation", a.certRotator.Run)
	}
	start("node API", a.api.Run)
	if a.healthz != nil {
		start("healthz", a.healthz.Run)
	}
	start("status manager", a.status.Run)
}

// startPodSide makes the root dir a shared mount, sets up the pod cgroups
// and device plugins, and starts the parts pods run with: the plugin
// watcher, the podresources API, volumes, PLEG,
// OOM watcher, log rotation, probes, pod sources, node shutdown, reclaim
// and the resource managers.
func (a *agent) startPodSide(ctx context.Context, start starter) error {
	logger := klog.FromContext(ctx)
	// Mount propagation (HostToContainer, Bidirectional) needs the root
	// dir to be a shared mount, as upstream makes it.
	if err := (volumemgr.HostMounter{}).MakeRShared(ctx, a.rootDir); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", a.rootDir, err)
	}
	if err := a.cgroups.start(ctx); err != nil {
		return err
	}
	keeper := cgroupKeeper{pods: a.pods, runtime: a.listing, classes: a.classes, resizer: a.resizer}
	start("pod cgroups", func(ctx context.Context) error { return a.cgroups.run(ctx, keeper) })
	if err := a.devices.Start(ctx); err != nil {
		return err
	}
	start("plugin watcher", a.plugins.Run)
	start("podresources API", a.podRes.Run)
	if a.dra != nil {
		start("dynamic resources", a.dra.Run)
	}
	if a.watching != nil {
		start("volume object watches", a.watching.Run)
	}
	start("volumes", a.volumes.Run)
	if a.csi != nil {
		start("volume stats", a.stats.RunVolumeStats)
	}
	start("pleg", a.pleg.Run)
	start("OOM watcher", func(ctx context.Context) error {
		// Best effort, as upstream: a kernel log that cannot be read (or
		// stops) costs the SystemOOM events, not the agent.
		if err := a.oom.Run(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "OOM watcher stopped; no SystemOOM events")
		}
		return nil
	})
	start("container log rotation", a.logRotation.Run)
	start("probes", a.probes.Run)
	start("probe results", a.probeRelay.Run)
	start("pod sources", a.merger.Run)
	start("node shutdown", func(ctx context.Context) error {
		// systemd-logind's PrepareForShutdown where it runs, and SIGPWR
		// (standing for a system shutdown) everywhere; SIGTERM and SIGINT
		// only stop the agent and leave pods running.
		return a.shutdown.Run(ctx, a.shutdownTrigger())
	})
	a.reclaim.run(start)
	a.resources.run(start)
	return nil
}

func nodeNameOf(override string) (string, error) {
	name := override
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("hostname: %w", err)
		}
		name = h
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return "", errors.New("empty node name")
	}
	return name, nil
}

// discardSink is the status sink of a standalone agent.
type discardSink struct{}

func (discardSink) SetPodStatus(context.Context, *v1.Pod, *v1.PodStatus) error { return nil }
func (discardSink) DeletePod(context.Context, *v1.Pod) error                   { return nil }

// newPLEG builds the PLEG as kubelet v1.37 does, through pleg.New: the
// generic PLEG, relisting every second; with the EventedPLEG gate (off by
// default) and a runtime that streams container events, the evented PLEG
// over it, where events also refresh their pods at once beside the same
// 1 s relist (and which falls back to relisting alone if the stream does
// not work).
func newPLEG(ctx context.Context, rt pleg.Runtime, cache *pleg.Cache, gates featuregate.FeatureGate, m pleg.Metrics, listing *runtimecache.Cache) pleg.PLEG {
	opts := pleg.Options{Metrics: m, RelistOnly: !gates.Enabled(featureEventedPLEG)}
	if listing != nil {
		opts.OnList = listing.Observe
	}
	p := pleg.New(rt, cache, opts)
	if _, evented := p.(*pleg.Evented); evented {
		klog.FromContext(ctx).Info("EventedPLEG: CRI container events beside the relist")
	}
	return p
}

// readyCondition is the node's Ready condition: the runtime must report
// ready and the PLEG must have relisted within its threshold, with
// upstream's messages.
func readyCondition(rt statusmgr.ReadinessChecker, p interface{ Healthy() error }, extra ...statusmgr.ReadinessChecker) statusmgr.ConditionProvider {
	return statusmgr.ReadyCondition(append([]statusmgr.ReadinessChecker{
		statusmgr.ReadinessFunc(func(ctx context.Context) error {
			if err := rt.Ready(ctx); err != nil {
				return fmt.Errorf("container runtime is not ready: %w", err)
			}
			return nil
		}),
		statusmgr.ReadinessFunc(func(context.Context) error {
			if err := p.Healthy(); err != nil {
				return fmt.Errorf("PLEG is not healthy: %w", err)
			}
			return nil
		}),
	}, extra...)...)
}

// idsPerPod is userNamespaces.idsPerPod, 0 (criruntime's default, 65536)
// when unset; a value set, 0 included, was validated by loadConfig.
func idsPerPod(cfg *kubeletv1beta1.KubeletConfiguration) int64 {
	if cfg.UserNamespaces == nil || cfg.UserNamespaces.IDsPerPod == nil {
		return 0
	}
	return *cfg.UserNamespaces.IDsPerPod
}
