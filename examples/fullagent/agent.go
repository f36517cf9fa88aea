package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/bootstrap"
	"github.com/nodekit/nodekit/cgroupmgr"
	"github.com/nodekit/nodekit/cgroupmgr/oomwatch"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/criruntime/userns"
	"github.com/nodekit/nodekit/devicemgr"
	"github.com/nodekit/nodekit/logs"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/podconfig"
	"github.com/nodekit/nodekit/podopts"
	"github.com/nodekit/nodekit/probes"
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
	client   kubernetes.Interface    // nil when standalone
	runtime  *criruntime.Runtime
	merger   *podconfig.Merger
	pleg     plegRunner
	relist   *pleg.Generic
	status   *statusmgr.Manager
	probes   *probes.Manager
	volumes  *volumemgr.Manager
	rootDir  string
	loop     *syncloop.Loop
	node     *statusmgr.NodeReporter
	lease    *statusmgr.Heartbeat
	informer informers.SharedInformerFactory
	events   record.EventBroadcaster
	// checkpoint wraps the API source: it keeps the objects pods use
	// through outages, and persists them with --pod-checkpoint.
	checkpoint *podconfig.CheckpointSource
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
	classes     *runtimeClasses        // runtimeClassName -> handler (runtimeclass.go)
	oom         *oomwatch.Watcher      // SystemOOM node events from the kernel log
	devices     *devicemgr.Manager     // device plugins (devices.go)
	probeRelay  *probeRelay            // probe results to the loop and the status manager
	certRotator *bootstrap.Rotator     // client certificate rotation (bootstrap.go)
	watching    *volumemgr.Watching    // ConfigMaps and Secrets of volumes, watched
	shutdown    *shutdown.Manager      // graceful node shutdown (SIGPWR)
	apiInformer informers.SharedInformerFactory
}

// newAgent builds the agent from the options and the loaded, validated
// configuration (loadConfig) and its feature gates.
func newAgent(ctx context.Context, o *options, cfg *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) (*agent, error) {
	logger := klog.FromContext(ctx)
	nodeName, err := nodeNameOf(o.hostnameOverride)
	if err != nil {
		return nil, err
	}
	if o.nodeIP != "" && net.ParseIP(o.nodeIP) == nil {
		return nil, fmt.Errorf("--node-ip: %q is not an IP address", o.nodeIP)
	}
	if err := os.MkdirAll(o.rootDir, 0o750); err != nil {
		return nil, fmt.Errorf("--root-dir: %w", err)
	}
	if err := kernelTunables(ctx, cfg, gates); err != nil {
		return nil, err
	}
	a := &agent{nodeName: nodeName, cfg: cfg, gates: gates, rootDir: o.rootDir}
	if a.metrics, err = newAgentMetrics(nodeName, time.Now()); err != nil {
		return nil, err
	}
	logger = logger.WithValues("node", nodeName)

	var recorder record.EventRecorder = &record.FakeRecorder{}
	if o.kubeconfig != "" {
		rc, err := a.clientConfig(ctx, o)
		if err != nil {
			return nil, err
		}
		rc.UserAgent = "nodekit-fullagent/" + nodeName
		rc.ContentType = cfg.ContentType
		// Events get a client of their own, limited by eventRecordQPS
		// and eventBurst, as kubelet's.
		ec := rest.CopyConfig(rc)
		ec.QPS, ec.Burst = float32(*cfg.EventRecordQPS), int(cfg.EventBurst)
		rc.QPS, rc.Burst = float32(*cfg.KubeAPIQPS), int(cfg.KubeAPIBurst)
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		events, err := kubernetes.NewForConfig(ec)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		a.client = cs
		a.events = record.NewBroadcaster(record.WithContext(ctx))
		a.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events("")})
		recorder = a.events.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: nodeName})
	} else {
		if err := checkStandaloneAuth(cfg); err != nil {
			return nil, err
		}
		logger.Info("No --kubeconfig: running standalone, static pods only")
	}

	// The user-namespace ID range, as kubelet: the kubelet user's
	// subordinate IDs (getsubids) or the default; New checks it.
	usernsFirst, usernsLength, err := userns.NodeRange(ctx, userns.OSHost{}, uint32(idsPerPod(cfg)))
	if err != nil {
		return nil, fmt.Errorf("create user namespace manager: kubelet mappings: %w", err)
	}
	maxPulls := 0
	if cfg.MaxParallelImagePulls != nil {
		maxPulls = int(*cfg.MaxParallelImagePulls)
	}
	a.runtime, err = criruntime.New(ctx, criruntime.Config{
		Endpoint: cfg.ContainerRuntimeEndpoint, ImageEndpoint: cfg.ImageServiceEndpoint,
		RequestTimeout: cfg.RuntimeRequestTimeout.Duration, PodLogsDir: cfg.PodLogsDir, Events: recorder,
		SerializeImagePulls: cfg.SerializeImagePulls, MaxParallelImagePulls: maxPulls,
		PullQPS: float32(*cfg.RegistryPullQPS), PullBurst: int(cfg.RegistryBurst),
		RootDir: o.rootDir, SeccompDefault: cfg.SeccompDefault != nil && *cfg.SeccompDefault, UserNamespaceIDsPerPod: idsPerPod(cfg),
		UserNamespaceFirstID: usernsFirst, UserNamespaceLength: usernsLength, UserNamespaceMaxPods: int(cfg.MaxPods),
		Metrics: a.metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("container runtime: %w", err)
	}
	if cfg.CgroupDriver, err = cgroupDriverFromRuntime(ctx, a.runtime, cfg.CgroupDriver, cgroupDriverRetry); err != nil {
		return nil, err
	}
	logMax := resource.MustParse(cfg.ContainerLogMaxSize) // validated by loadConfig
	a.logRotation, err = logs.New(logs.Config{
		MaxSize: logMax.Value(), MaxFiles: int(*cfg.ContainerLogMaxFiles),
		Workers: int(*cfg.ContainerLogMaxWorkers), Interval: cfg.ContainerLogMonitorInterval.Duration,
	}, a.runtime)
	if err != nil {
		return nil, fmt.Errorf("container log rotation: %w", err)
	}

	// Pod sources.
	var sources []nodekit.Source
	clk := clock.RealClock{}
	if cfg.StaticPodPath != "" {
		sources = append(sources, podconfig.NewFileSource(cfg.StaticPodPath, nodeName, clk, podconfig.WithPeriod(cfg.FileCheckFrequency.Duration)))
	}
	if cfg.StaticPodURL != "" {
		sources = append(sources, podconfig.NewHTTPSource(cfg.StaticPodURL, nodeName, nil, clk,
			podconfig.WithPeriod(cfg.HTTPCheckFrequency.Duration), podconfig.WithHeader(cfg.StaticPodURLHeader)))
	}
	if a.client != nil {
		api, err := a.apiSource(o) // checkpoint.go
		if err != nil {
			return nil, err
		}
		sources = append(sources, api)
	}
	if len(sources) == 0 {
		return nil, errors.New("no pod source: give --kubeconfig, --pod-manifest-path (staticPodPath) or staticPodURL")
	}
	a.merger = podconfig.New(sources, podconfig.WithRecorder(recorder))

	cache := pleg.NewCache()
	a.relist, a.pleg = newPLEG(ctx, a.runtime, cache, gates, a.metrics)

	// Status: the API server, or nowhere when standalone.
	var sink nodekit.StatusSink = discardSink{}
	var mirror syncloop.MirrorClient
	if a.client != nil {
		sink = statusmgr.NewAPISink(a.client)
		mirror = statusmgr.NewMirrorClient(a.client, nodeName)
	}
	var loop *syncloop.Loop // the status manager reads pods from the loop
	a.status, err = statusmgr.NewManager(statusmgr.Config{
		Sink:    sink,
		Mirrors: statusmgr.MirrorPodGetterFunc(func(n string) (*v1.Pod, bool) { return loop.GetMirrorPod(n) }),
		Pods:    statusmgr.PodGetterFunc(func(uid types.UID) (*v1.Pod, bool) { return loop.GetPodByUID(uid) }),
	})
	if err != nil {
		return nil, err
	}

	nodeIPs := []string{}
	if o.nodeIP != "" {
		nodeIPs = append(nodeIPs, o.nodeIP)
	}
	machine := statusmgr.HostMachine{RootDir: o.rootDir}
	// Allocatable stands in for missing limits in resourceFieldRef env and
	// downwardAPI volumes, as upstream.
	allocatable, err := nodeAllocatable(ctx, machine, reserved(cfg))
	if err != nil {
		return nil, err
	}
	if a.cgroups, err = newPodCgroups(ctx, cfg, machine); err != nil {
		return nil, err
	}
	nodeRef := &v1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}
	if a.oom, err = oomwatch.New(oomwatch.Config{OnOOM: func(ev oomwatch.Event) {
		if ev.VictimCgroup != "/" {
			return // a container's own limit: its status says OOMKilled
		}
		msg := "System OOM encountered"
		if ev.ProcessName != "" && ev.PID != 0 {
			msg = fmt.Sprintf("%s, victim process: %s, pid: %d", msg, ev.ProcessName, ev.PID)
		}
		recorder.Eventf(nodeRef, v1.EventTypeWarning, "SystemOOM", "%s", msg)
	}}); err != nil {
		return nil, err
	}
	a.classes = &runtimeClasses{}
	if a.client != nil {
		a.apiInformer = informers.NewSharedInformerFactory(a.client, 0)
		a.classes.lister = a.apiInformer.Node().V1().RuntimeClasses().Lister()
	}
	nodeGetter, err := a.nodeGetter(ctx, machine)
	if err != nil {
		return nil, err
	}
	env := podopts.NewResolver(podopts.Config{NodeIPs: nodeIPs, NodeAllocatable: allocatable, Events: recorder})
	if a.client != nil {
		cl := a.objects() // cached through API server outages (checkpoint.go)
		env = podopts.NewResolver(podopts.Config{ConfigMaps: cl, Secrets: cl, Services: cl, NodeIPs: nodeIPs, NodeAllocatable: allocatable, Events: recorder})
	}
	builder := &podopts.Builder{
		Env: env,
		DNS: &podopts.DNSConfigurer{ClusterDNS: cfg.ClusterDNS, ClusterDomain: cfg.ClusterDomain, ResolvConf: *cfg.ResolverConfig, NodeIPs: nodeIPs, Events: recorder},
	}
	vcfg := volumemgr.Config{RootDir: o.rootDir, Events: recorder, RefreshPeriod: cfg.SyncFrequency.Duration, NodeAllocatable: allocatable,
		ContainerEnv: func(ctx context.Context, p *v1.Pod, c *v1.Container) ([]nodekit.EnvVar, error) {
			return env.Envs(ctx, p, c, nil)
		}}
	if a.client != nil {
		vcfg.Objects, vcfg.Tokens = a.volumeSources() // checkpoint.go
	}
	if a.volumes, err = volumemgr.New(vcfg); err != nil {
		return nil, err
	}
	builder.VolumeMounts = a.volumes.ContainerMounts
	a.probes, err = probes.NewManager(probes.Config{Status: a.status, Execer: a.runtime, Recorder: recorder, Metrics: a.metrics.probes})
	if err != nil {
		return nil, err
	}
	a.probeRelay = newProbeRelay(a.probes, a.status, func(uid types.UID) (*v1.Pod, bool) { return loop.GetPodByUID(uid) })
	hooks := probes.NewHookRunner(probes.HookConfig{Execer: a.runtime, Recorder: recorder})
	// The loop is built below; the managers ask it for active pods only
	// once the agent runs.
	if a.resources, err = a.newResources(ctx, func() []*v1.Pod { return loop.ActivePods() }, func() bool { return loop.SourcesReady() }, a.status); err != nil {
		return nil, err
	}
	sysctls, err := sysctlAdmitter(cfg)
	if err != nil {
		return nil, err
	}
	if a.shutdown, err = a.newShutdown(cfg, recorder, func() *syncloop.Loop { return loop }); err != nil {
		return nil, err
	}
	if a.devices, err = a.newDevices(ctx, func() []*v1.Pod { return loop.NotTerminatedPods() }, func() bool { return loop.SourcesReady() }); err != nil {
		return nil, err
	}
	var secrets syncloop.SecretGetter
	if a.client != nil {
		secrets = a.objects()
	}
	loop, err = syncloop.New(syncloop.Config{
		Runtime: a.runtime, Cache: cache, Status: a.status, Updates: a.merger.Updates(),
		SourcesReady: a.merger.SeenAllSources, Events: a.pleg.Events(),
		Health: func(ctx context.Context) error {
			if err := a.runtime.Ready(ctx); err != nil {
				return err
			}
			return a.pleg.Healthy()
		},
		// Pressure first, as upstream; the eviction manager needs the
		// loop, so it joins the chain through a closure.
		// The topology manager (which has the CPU and memory managers
		// allocate) comes before the built-in predicates, as upstream;
		// the built-ins end with PodFeatures (DRA claims and
		// RestartAllContainers rules are refused), then AppArmor and
		// node shutdown.
		Admitters: append([]nodekit.Admitter{nodekit.AdmitFunc(func(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
			return a.reclaim.eviction.Admit(ctx, req)
		}), sysctls, a.resources.topology, a.devices}, append(builtins(nodeGetter, a.devices), admission.NewAppArmor(admission.AppArmorHostEnabled()), a.shutdown)...),
		Probes:        probeResults{a.probes},
		ProbeWorkers:  a.probes,
		ProbeUpdates:  a.probeRelay.Updates(),
		Hooks:         hooks,
		Mirror:        mirror,
		Secrets:       secrets,
		Volumes:       a.volumes,
		Recorder:      recorder,
		Options:       a.cgroups.options(a.resources.options(a.devices.WrapOptions(builder.Options(func(p *v1.Pod) string { return syncloop.PodDir(o.rootDir, p.UID) })))),
		Sandbox:       a.cgroups.sandbox(a.classes.sandbox(builder.Sandbox)),
		ContainerHash: criruntime.HashContainer,
		RootDir:       o.rootDir,
		NodeIPs:       nodeIPs,
		SyncPeriod:    cfg.SyncFrequency.Duration,
		Metrics:       a.metrics,
	})
	if err != nil {
		return nil, err
	}
	a.loop = loop
	if a.stats, err = stats.New(stats.Config{NodeName: nodeName, RootDir: o.rootDir, PodLogsDir: cfg.PodLogsDir,
		Runtime: a.runtime, Pods: a.runtime}); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if a.reclaim, err = a.newReclaim(ctx, o, recorder); err != nil {
		return nil, err
	}
	if a.api, a.apiCert, a.metrics, err = a.newAPIServer(ctx, o, nodeIPs); err != nil {
		return nil, fmt.Errorf("node API: %w", err)
	}
	if a.healthz, err = healthzServer(cfg); err != nil {
		return nil, err
	}

	if a.client != nil && *cfg.RegisterNode {
		labels := map[string]string{}
		for k, v := range o.nodeLabels {
			labels[k] = v
		}
		a.node, err = statusmgr.NewNodeReporter(a.client, statusmgr.NodeConfig{
			NodeName: nodeName, NodeIP: o.nodeIP, Labels: labels, Taints: cfg.RegisterWithTaints,
			MaxPods: int(cfg.MaxPods), Reserved: reserved(cfg), KubeletPort: cfg.Port, Machine: machine, Runtime: a.runtime, Startup: a.metrics,
			Conditions:            a.nodeConditions(),
			Setters:               []statusmgr.StatusSetter{deviceStatus(a.devices), a.runtime},
			StatusUpdateFrequency: cfg.NodeStatusUpdateFrequency.Duration,
			StatusReportFrequency: cfg.NodeStatusReportFrequency.Duration,
		})
		if err != nil {
			return nil, err
		}
		a.lease, err = statusmgr.NewHeartbeat(a.client, statusmgr.HeartbeatConfig{NodeName: nodeName, LeaseDurationSeconds: cfg.NodeLeaseDurationSeconds})
		if err != nil {
			return nil, err
		}
	}
	return a, nil
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
	a.informer = informers.NewSharedInformerFactoryWithOptions(a.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.nodeName).String()
		}))
	a.informer.Core().V1().Nodes().Lister() // registers the informer before Start
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

func (a *agent) run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	errc := make(chan error, 8)
	start := func(name string, f func(context.Context) error) {
		go func() {
			if err := f(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	// One relist before registering, so the node's first status can
	// already say Ready (the PLEG is healthy once it has relisted).
	a.relist.Relist(ctx)
	if a.node != nil {
		a.register(ctx) // not fatal: the API server may be unreachable
		start("node status", a.node.Run)
		start("lease", a.lease.Run)
	}
	if a.apiInformer != nil {
		a.apiInformer.Start(ctx.Done()) // not waited for: the API server may be down
	}
	if a.informer != nil {
		a.informer.Start(ctx.Done())
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
	// Mount propagation (HostToContainer, Bidirectional) needs the root
	// dir to be a shared mount, as upstream makes it.
	if err := (volumemgr.HostMounter{}).MakeRShared(ctx, a.rootDir); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", a.rootDir, err)
	}
	if err := a.cgroups.start(ctx); err != nil {
		return err
	}
	start("pod cgroups", func(ctx context.Context) error { return a.cgroups.run(ctx, a) })
	if err := a.devices.Start(ctx); err != nil {
		return err
	}
	if a.watching != nil {
		start("volume object watches", a.watching.Run)
	}
	start("volumes", a.volumes.Run)
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
		// SIGPWR stands for a system shutdown (no systemd-logind here);
		// SIGTERM and SIGINT only stop the agent and leave pods running.
		return a.shutdown.Run(ctx, shutdown.SignalTrigger(syscall.SIGPWR))
	})
	a.reclaim.run(start)
	a.resources.run(start)
	logger.Info("fullagent running", "runtime", a.cfg.ContainerRuntimeEndpoint, "staticPodPath", a.cfg.StaticPodPath)
	loopDone := make(chan error, 1)
	go func() { loopDone <- a.loop.Run(ctx) }()
	var loopErr error
	select {
	case err := <-errc:
		return err
	case loopErr = <-loopDone:
	}
	if a.events != nil {
		a.events.Shutdown()
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = a.runtime.Close(shutdownCtx)
	if ctx.Err() != nil {
		return nil // stopped: the loop ends with the context
	}
	return loopErr
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

// probeResults adapts the probe manager's results to the loop's types
// (the same values under each package's own names).
type probeResults struct{ m *probes.Manager }

func (p probeResults) Result(k syncloop.ProbeKind, id nodekit.ContainerID) (syncloop.ProbeResult, bool) {
	r, ok := p.m.Result(probes.Kind(k), id)
	return syncloop.ProbeResult(r), ok
}

// newPLEG builds the PLEG as kubelet v1.37 does: the generic PLEG,
// relisting every second; with the EventedPLEG gate (off by default) and a
// runtime that streams container events, the evented PLEG over it, where
// events also refresh their pods at once beside the same 1 s relist (and
// which falls back to relisting alone if the stream does not work). It
// returns the generic PLEG and the one to run.
func newPLEG(ctx context.Context, rt pleg.Runtime, cache *pleg.Cache, gates featuregate.FeatureGate, m pleg.Metrics) (*pleg.Generic, plegRunner) {
	relist := pleg.NewGeneric(rt, cache, pleg.Options{Metrics: m})
	if ev, ok := rt.(pleg.ContainerEventer); ok && gates.Enabled(featureEventedPLEG) {
		klog.FromContext(ctx).Info("EventedPLEG: CRI container events beside the relist")
		return relist, pleg.NewEvented(relist, ev)
	}
	return relist, relist
}

// plegRunner is what the agent needs of a PLEG: the generic and the
// evented one both fit.
type plegRunner interface {
	Run(ctx context.Context) error
	Events() <-chan *pleg.Event
	Healthy() error
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
