package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	nodev1listers "k8s.io/client-go/listers/node/v1"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/cgroupmgr/oomwatch"
	"github.com/nodekit/nodekit/credentialprovider"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/criruntime/userns"
	"github.com/nodekit/nodekit/events"
	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/logs"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/podconfig"
	"github.com/nodekit/nodekit/podopts"
	"github.com/nodekit/nodekit/probes"
	"github.com/nodekit/nodekit/pullrecords"
	"github.com/nodekit/nodekit/runtimecache"
	"github.com/nodekit/nodekit/stats"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
	"github.com/nodekit/nodekit/volumemgr"
)

// The layers newAgent builds, in order. The pod store is built first on
// the pod side and handed to the status manager, the probe relay and the
// loop. The loop is built last; parts built before it that need its
// workers' view (the resource, device, DRA and shutdown managers,
// eviction and garbage collection, in-place resize) are handed the store,
// which answers for the loop once syncloop.New has attached it.

// newRuntimeSide builds the CRI runtime (and its image service), settles
// the cgroup driver, the container log rotation and the PLEG, and returns
// the pod cache the PLEG fills.
func (a *agent) newRuntimeSide(ctx context.Context, o *options, recorder *events.Recorder) (*pleg.Cache, error) {
	cfg := a.cfg
	// The user-namespace ID range, as kubelet: the kubelet user's
	// subordinate IDs (getsubids) or the default; New checks it.
	usernsFirst, usernsLength, err := userns.NodeRange(ctx, userns.OSHost{}, uint32(idsPerPod(cfg)))
	if err != nil {
		return nil, fmt.Errorf("create user namespace manager: kubelet mappings: %w", err)
	}
	creds, err := credentialProviders(o, a.gates, a.serviceAccounts(), a.metrics.reg)
	if err != nil {
		return nil, err
	}
	records, err := pullRecords(ctx, o, cfg, a.gates)
	if err != nil {
		return nil, err
	}
	a.pullRecords = records
	maxPulls := maxParallelPulls(cfg)
	a.runtime, err = criruntime.New(ctx, criruntime.Config{
		Endpoint: cfg.ContainerRuntimeEndpoint, ImageEndpoint: cfg.ImageServiceEndpoint,
		RequestTimeout: cfg.RuntimeRequestTimeout.Duration, PodLogsDir: cfg.PodLogsDir, Events: recorder,
		SerializeImagePulls: cfg.SerializeImagePulls, MaxParallelImagePulls: maxPulls, MaxParallelSandboxCreations: o.sandboxCreations,
		PullQPS: float32(*cfg.RegistryPullQPS), PullBurst: int(cfg.RegistryBurst),
		RootDir: o.rootDir, SeccompDefault: cfg.SeccompDefault != nil && *cfg.SeccompDefault, UserNamespaceIDsPerPod: idsPerPod(cfg),
		UserNamespaceFirstID: usernsFirst, UserNamespaceLength: usernsLength, UserNamespaceMaxPods: int(cfg.MaxPods),
		DisableCPUCFSQuota: !*cfg.CPUCFSQuota, Metrics: a.metrics, Credentials: creds,
		PullRecords: records, TracerProvider: a.tracer,
	})
	if err != nil {
		return nil, fmt.Errorf("container runtime: %w", err)
	}
	if records != nil {
		if err := a.startPullRecords(ctx, records); err != nil {
			return nil, err
		}
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
	cache := pleg.NewCache()
	a.listing = runtimecache.New(runtimecache.Config{Runtime: a.runtime})
	a.pleg = newPLEG(ctx, a.runtime, cache, a.gates, a.metrics, a.listing)
	return cache, nil
}

// startPullRecords registers the records' metrics and, as kubelet at
// start-up, turns the intents a previous run left (it stopped mid-pull)
// into records for the images that arrived; then it prunes the records of
// images no longer on the node.
func (a *agent) startPullRecords(ctx context.Context, records *pullrecords.Verifier) error {
	if err := records.RegisterMetrics(a.metrics.reg); err != nil { // kubelet_imagemanager_*
		return err
	}
	listed := time.Now()
	imgs, err := a.runtime.ListImages(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to list images for the image pull records")
		return nil
	}
	records.Recover(ctx, imgs)
	ids := make([]string, 0, len(imgs))
	for _, img := range imgs {
		ids = append(ids, img.GetId())
	}
	records.Prune(ctx, ids, listed)
	return nil
}

// maxParallelPulls is maxParallelImagePulls; 0 (no limit) when unset.
func maxParallelPulls(cfg *kubeletv1beta1.KubeletConfiguration) int {
	if cfg.MaxParallelImagePulls == nil {
		return 0
	}
	return int(*cfg.MaxParallelImagePulls)
}

// pullRecords opens the image pull records under the root dir when
// KubeletEnsureSecretPulledImages is on (kubeletconfig has checked the
// policy and the allowlist against the gate); nil when it is off, and a
// present image is then used by any pod, as kubelet without the gate.
func pullRecords(ctx context.Context, o *options, cfg *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) (*pullrecords.Verifier, error) {
	if !gates.Enabled("KubeletEnsureSecretPulledImages") {
		return nil, nil
	}
	v, err := pullrecords.New(ctx, pullrecords.Config{RootDir: o.rootDir,
		Policy: cfg.ImagePullCredentialsVerificationPolicy, Allowlist: cfg.PreloadedImagesVerificationAllowlist,
		MaxPods: int(cfg.MaxPods), MaxParallelPulls: maxParallelPulls(cfg)})
	if err != nil {
		return nil, fmt.Errorf("image pull records (imagePullCredentialsVerificationPolicy, preloadedImagesVerificationAllowlist): %w", err)
	}
	return v, nil
}

// credentialProviders loads the image credential provider plugins when
// either flag is given, as kubelet: a missing bin dir or config, an
// invalid config or a missing plugin binary stops the agent, naming it.
// Nil when neither flag is set. sas (nil when standalone) serves the
// providers with tokenAttributes. The plugin metrics
// (kubelet_credential_provider_*) are registered with reg once the
// providers are loaded, as kubelet registers them then.
func credentialProviders(o *options, gates featuregate.FeatureGate, sas credentialprovider.ServiceAccounts, reg prometheus.Registerer) (criruntime.CredentialLookup, error) {
	if o.credProviderConfig == "" && o.credProviderBinDir == "" {
		return nil, nil
	}
	kr, err := credentialprovider.Load(credentialprovider.Config{
		ConfigPath: o.credProviderConfig, BinDir: o.credProviderBinDir,
		ServiceAccountTokens: gates.Enabled("KubeletServiceAccountTokenForCredentialProviders"),
		ServiceAccounts:      sas,
	})
	if err != nil {
		return nil, fmt.Errorf("image credential providers (--image-credential-provider-config, --image-credential-provider-bin-dir): %w", err)
	}
	if err := kr.RegisterMetrics(reg); err != nil {
		return nil, err
	}
	return kr, nil
}

// serviceAccounts reads service accounts and requests their tokens with
// the node's client, for credential providers; nil when standalone.
func (a *agent) serviceAccounts() credentialprovider.ServiceAccounts {
	if a.client == nil {
		return nil
	}
	return clientServiceAccounts{a.client}
}

// clientServiceAccounts is credentialprovider.ServiceAccounts over the
// agent's client.
type clientServiceAccounts struct{ c kubeclient.Interface }

var _ credentialprovider.ServiceAccounts = clientServiceAccounts{}

func (s clientServiceAccounts) GetServiceAccount(ctx context.Context, namespace, name string) (*v1.ServiceAccount, error) {
	return s.c.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (s clientServiceAccounts) CreateToken(ctx context.Context, namespace, name string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return s.c.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
}

// newSources builds the pod sources (static pod path, static pod URL, the
// API server through its checkpoint) and the merger over them.
func (a *agent) newSources(o *options, recorder *events.Recorder) error {
	cfg := a.cfg
	var sources []nodekit.Source
	clk := clock.RealClock{}
	if cfg.StaticPodPath != "" {
		sources = append(sources, podconfig.NewFileSource(cfg.StaticPodPath, a.nodeName, clk, podconfig.WithPeriod(cfg.FileCheckFrequency.Duration)))
	}
	if cfg.StaticPodURL != "" {
		sources = append(sources, podconfig.NewHTTPSource(cfg.StaticPodURL, a.nodeName, nil, clk,
			podconfig.WithPeriod(cfg.HTTPCheckFrequency.Duration), podconfig.WithHeader(cfg.StaticPodURLHeader)))
	}
	if a.client != nil {
		api, err := a.apiSource(o) // checkpoint.go
		if err != nil {
			return err
		}
		sources = append(sources, api)
	}
	if len(sources) == 0 {
		return errors.New("no pod source: give --kubeconfig, --pod-manifest-path (staticPodPath) or staticPodURL")
	}
	a.merger = podconfig.New(sources, podconfig.WithRecorder(recorder), podconfig.WithSharedPods())
	return nil
}

// statusParallel is how many pods' statuses fullagent publishes at once.
// One at a time, a burst of pod starts waited on each patch's round trip
// in turn (a pod's Running status about 0.4 s after its containers
// started, at 100 pods on the fake runtime); at 2 that median fell to
// 0.14 s. More would publish more of the short-lived Pending statuses
// separately, each a request of the node's rate-limited budget
// (kubeAPIQPS, kubeAPIBurst), which every request waits on all the same.
const statusParallel = 2

// newStatusManager builds the pod status manager, writing to the API
// server, or nowhere when standalone. It returns the loop's mirror-pod
// client (nil when standalone).
func (a *agent) newStatusManager() (syncloop.MirrorClient, error) {
	var sink nodekit.StatusSink = discardSink{}
	var mirror syncloop.MirrorClient
	if a.client != nil {
		sink = statusmgr.NewAPISink(a.client)
		mirror = statusmgr.NewMirrorClient(a.client, a.nodeName)
	}
	var err error
	// The sync loop's pods are never modified once stored: the manager
	// keeps them instead of a copy of each. Statuses go to statusParallel
	// pods at once (the API sink is safe for concurrent use).
	a.status, err = statusmgr.NewManager(statusmgr.Config{
		Sink:      sink,
		Mirrors:   a.pods,
		Pods:      a.pods,
		SharePods: true,
		Parallel:  statusParallel,
	})
	return mirror, err
}

// host is what the pod side learns of the node and hands the node side.
type host struct {
	nodeIPs     []string // --node-ip, if given
	machine     statusmgr.HostMachine
	allocatable v1.ResourceList
	node        admission.NodeGetter
}

// newHost reads the machine and builds the node-level parts pods run in:
// the pod cgroups, the SystemOOM watcher, the runtime classes and the
// node admission reads.
func (a *agent) newHost(ctx context.Context, o *options, recorder *events.Recorder) (host, error) {
	h := host{nodeIPs: []string{}, machine: statusmgr.HostMachine{RootDir: o.rootDir}}
	if o.nodeIP != "" {
		h.nodeIPs = append(h.nodeIPs, o.nodeIP)
	}
	// Allocatable stands in for missing limits in resourceFieldRef env and
	// downwardAPI volumes, as upstream.
	var err error
	if h.allocatable, err = nodeAllocatable(ctx, h.machine, reserved(a.cfg)); err != nil {
		return h, err
	}
	if a.cgroups, err = newPodCgroups(ctx, a.cfg, h.machine, a.systemBus, a.metrics); err != nil {
		return h, err
	}
	if a.oom, err = oomwatch.New(oomwatch.Config{OnOOM: systemOOMEvents(recorder, a.nodeName)}); err != nil {
		return h, err
	}
	a.classes = &runtimeClasses{}
	if a.client != nil {
		if a.apiInformer == nil { // the API source made it (checkpoint.go)
			a.apiInformer = newAPIInformers(a.client)
		}
		a.classes.lister = nodev1listers.NewRuntimeClassLister(a.apiInformer.classes.GetIndexer())
	}
	h.node, err = a.nodeGetter(ctx, h.machine)
	return h, err
}

// systemOOMEvents records a SystemOOM warning on the node for an OOM kill
// of the whole machine (not a container's own limit).
func systemOOMEvents(recorder *events.Recorder, nodeName string) func(oomwatch.Event) {
	nodeRef := &v1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}
	return func(ev oomwatch.Event) {
		if ev.VictimCgroup != "/" {
			return // a container's own limit: its status says OOMKilled
		}
		msg := "System OOM encountered"
		if ev.ProcessName != "" && ev.PID != 0 {
			msg = fmt.Sprintf("%s, victim process: %s, pid: %d", msg, ev.ProcessName, ev.PID)
		}
		recorder.Eventf(nodeRef, v1.EventTypeWarning, "SystemOOM", "%s", msg)
	}
}

// newPodOptions builds the resolver of pods' environment and DNS and the
// volume manager, and returns the builder of the CRI sandbox and
// container options.
func (a *agent) newPodOptions(o *options, recorder *events.Recorder, h host) (*podopts.Builder, error) {
	cfg := a.cfg
	env := podopts.NewResolver(podopts.Config{NodeIPs: h.nodeIPs, NodeAllocatable: h.allocatable, Events: recorder})
	if a.client != nil {
		cl := a.objects() // cached through API server outages (checkpoint.go)
		env = podopts.NewResolver(podopts.Config{ConfigMaps: cl, Secrets: cl, Services: cl, NodeIPs: h.nodeIPs, NodeAllocatable: h.allocatable, Events: recorder})
	}
	builder := &podopts.Builder{
		Env: env,
		DNS: &podopts.DNSConfigurer{ClusterDNS: cfg.ClusterDNS, ClusterDomain: cfg.ClusterDomain, ResolvConf: *cfg.ResolverConfig, NodeIPs: h.nodeIPs, Events: recorder},
	}
	vcfg := volumemgr.Config{RootDir: o.rootDir, Events: recorder, RefreshPeriod: cfg.SyncFrequency.Duration, NodeAllocatable: h.allocatable,
		ContainerEnv: func(ctx context.Context, p *v1.Pod, c *v1.Container) ([]nodekit.EnvVar, error) {
			return env.Envs(ctx, p, c, nil)
		},
		RecursiveReadOnly: rroSupport{a.runtime, a.classes}, // runtimeclass.go
	}
	if a.client != nil {
		vcfg.Objects, vcfg.Tokens = a.volumeSources() // checkpoint.go
	}
	var err error
	if a.csi, err = a.newCSI(o.rootDir, recorder); err != nil { // csi.go
		return nil, err
	}
	vcfg.Plugins = a.csi.volumePlugins()
	if a.volumes, err = volumemgr.New(vcfg); err != nil {
		return nil, err
	}
	if err := a.volumes.RegisterMetrics(a.metrics.reg); err != nil { // volume_manager_total_volumes
		return nil, fmt.Errorf("volumes: %w", err)
	}
	builder.VolumeMounts = a.volumes.ContainerMounts
	builder.VolumeDevices = a.volumes.ContainerDevices
	return builder, nil
}

// newProbes builds the probe manager and returns the lifecycle hook
// runner.
func (a *agent) newProbes(recorder *events.Recorder) (*probes.HookRunner, error) {
	var err error
	a.probes, err = probes.NewManager(probes.Config{Status: a.status, Execer: a.runtime, Recorder: recorder, Metrics: a.metrics.probes})
	if err != nil {
		return nil, err
	}
	return probes.NewHookRunner(probes.HookConfig{Execer: a.runtime, Recorder: recorder}), nil
}

// newProbeRelay builds the relay of probe results into the pod statuses
// and, with them, of the other wake-ups of the loop's pod workers: a
// deferred resize that may fit now, a device's or claim's health change.
func (a *agent) newProbeRelay() *probes.Relay {
	wake := []<-chan types.UID{a.resizer.Retries()}
	if report, _ := healthGates(a.gates); report {
		dev, claims := healthUpdates(a.devices, a.dra)
		wake = append(wake, dev, claims)
	}
	return probes.NewRelay(a.probes, a.status, a.pods, wake...)
}

// newPodSide builds the pod sources, the status manager, the node-level
// parts pods run in, their options and volumes, the probes, the admission
// policies and the loop over them all. It returns what it learnt of the
// node, for the node side.
func (a *agent) newPodSide(ctx context.Context, o *options, recorder *events.Recorder, cache *pleg.Cache) (host, error) {
	if err := a.newSources(o, recorder); err != nil {
		return host{}, err
	}
	a.pods = syncloop.NewPodStore()
	mirror, err := a.newStatusManager()
	if err != nil {
		return host{}, err
	}
	h, err := a.newHost(ctx, o, recorder)
	if err != nil {
		return h, err
	}
	builder, err := a.newPodOptions(o, recorder, h)
	if err != nil {
		return h, err
	}
	hooks, err := a.newProbes(recorder)
	if err != nil {
		return h, err
	}
	if err := a.newReclaimSide(ctx, o, recorder); err != nil {
		return h, err
	}
	admitters, err := a.newAdmitters(ctx, recorder, h.node)
	if err != nil {
		return h, err
	}
	var secrets syncloop.SecretGetter
	if a.client != nil {
		secrets = a.objects()
	}
	if a.resizer, err = a.newResizer(o.rootDir, h.node, recorder); err != nil {
		return h, err
	}
	a.probeRelay = a.newProbeRelay()
	a.loop, err = syncloop.New(syncloop.Config{
		Runtime: a.runtime, Listing: a.listing, Pods: a.pods, Cache: cache, Status: a.status, Updates: a.merger.Updates(),
		SourcesReady: a.merger.SeenAllSources, Events: a.pleg.Events(), Relister: a.pleg,
		Health: func(ctx context.Context) error {
			if err := a.runtime.Ready(ctx); err != nil {
				return err
			}
			return a.pleg.Healthy()
		},
		Admitters:         admitters,
		Probes:            a.probes,
		ProbeWorkers:      a.probes,
		ProbeUpdates:      a.probeRelay.Updates(),
		Hooks:             hooks,
		Mirror:            mirror,
		Secrets:           secrets,
		Volumes:           a.volumes,
		DynamicResources:  draSync(a.dra),
		Recorder:          recorder,
		Options:           a.containerOptions(builder, o.rootDir),
		Sandbox:           a.sandboxOptions(builder),
		ContainerHash:     criruntime.HashContainer,
		RootDir:           o.rootDir,
		Mounts:            mountPaths{volumemgr.HostMounter{}},
		NodeIPs:           h.nodeIPs,
		SyncPeriod:        a.cfg.SyncFrequency.Duration,
		Metrics:           a.metrics,
		Resizer:           a.resizer,
		UpdateObservers:   a.updateObservers(recorder),
		ResourceHealth:    resourceHealth(a.gates, a.devices, a.dra),
		RecursiveReadOnly: rroSupport{a.runtime, a.classes},
		TracerProvider:    a.tracer,
	})
	return h, err
}

// containerOptions resolves each container's settings in layers, each
// adding its own to those of the layer below: the pod's env, DNS and
// volume mounts (podopts), the device plugins' envs, mounts and devices,
// the DRA claims' CDI devices, the CPU and memory managers' cpusets and
// memory nodes, and the OOM score of the pod's QoS class.
func (a *agent) containerOptions(builder *podopts.Builder, rootDir string) nodekit.ContainerOptionsFunc {
	opts := builder.Options(func(p *v1.Pod) string { return syncloop.PodDir(rootDir, p.UID) })
	opts = a.devices.WrapOptions(opts)
	opts = draOptions(a.dra, opts)
	opts = a.resources.options(opts)
	return a.cgroups.options(opts)
}

// sandboxOptions resolves each pod's sandbox settings: DNS and hostname
// (podopts), the runtime handler of its runtime class, and its pod cgroup
// (sized to the active pods' QoS tiers).
func (a *agent) sandboxOptions(builder *podopts.Builder) func(context.Context, *v1.Pod) (nodekit.SandboxOptions, error) {
	sandbox := a.classes.sandbox(builder.Sandbox)
	return a.cgroups.sandbox(a.pods.ActivePods, sandbox)
}

// newAdmitters builds the managers that admit pods beside the built-in
// predicates (CPU, memory and topology; node shutdown; device plugins)
// and returns the admission chain in upstream's order
// (admission.DefaultChain).
func (a *agent) newAdmitters(ctx context.Context, recorder *events.Recorder, node admission.NodeGetter) ([]nodekit.Admitter, error) {
	var err error
	// The loop is built after: the managers read its view through the
	// pod store.
	if a.resources, err = a.newResources(ctx, a.pods.ActivePods, a.pods.SourcesReady, a.status); err != nil {
		return nil, err
	}
	sysctls, err := sysctlAdmitter(a.cfg)
	if err != nil {
		return nil, err
	}
	if a.shutdown, err = a.newShutdown(a.cfg, recorder, a.pods); err != nil {
		return nil, err
	}
	if a.devices, err = a.newDevices(ctx, a.pods.NotTerminatedPods, a.pods.SourcesReady); err != nil {
		return nil, err
	}
	// The DRA manager is a handler of the plugin watcher: built first.
	if a.dra, err = a.newDRA(ctx, a.pods.NotTerminatedPods, a.pods.SourcesReady); err != nil {
		return nil, err
	}
	if a.plugins, err = a.newPluginWatcher(); err != nil {
		return nil, err
	}
	if a.podRes, err = a.newPodResources(); err != nil {
		return nil, err
	}
	if err := a.podRes.RegisterMetrics(a.metrics.reg); err != nil { // kubelet_pod_resources_endpoint_*
		return nil, err
	}
	return admission.DefaultChain(admission.ChainConfig{
		Eviction:  a.reclaim.eviction,
		Sysctls:   sysctls,
		Resources: a.resources.topology,
		Devices:   a.devices,
		// ResourceFit sees the allocatable the device manager sanitizes.
		Builtins:         builtins(node, a.devices, a.gates, a.dra != nil),
		AppArmor:         admission.NewAppArmor(admission.AppArmorHostEnabled()),
		DeclaredFeatures: a.declaredAdmit,
		Shutdown:         a.shutdown,
	}), nil
}

// newReclaimSide builds stats and reclaim (container and image GC,
// eviction) on the pod side, before the admission chain the eviction
// manager is part of.
func (a *agent) newReclaimSide(ctx context.Context, o *options, recorder *events.Recorder) error {
	var err error
	// Every volume of the agent's pods is measured every
	// volumeStatsAggPeriod (0: none, as upstream).
	scfg := stats.Config{NodeName: a.nodeName, RootDir: o.rootDir, PodLogsDir: a.cfg.PodLogsDir, Runtime: a.runtime, Pods: a.runtime,
		Specs: a.pods, VolumeStatsPeriod: a.cfg.VolumeStatsAggPeriod.Duration, PodCgroups: a.cgroups.statsCgroups(a.pods)}
	if scfg.VolumeStatsPeriod <= 0 {
		scfg.VolumeStatsPeriod = -1
	}
	a.csi.statsConfig(&scfg) // csi.go
	if a.stats, err = stats.New(scfg); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	if a.csi != nil {
		if err := a.stats.RegisterVolumeMetrics(a.metrics.reg); err != nil {
			return fmt.Errorf("stats: %w", err)
		}
	}
	a.reclaim, err = a.newReclaim(ctx, o, recorder)
	return err
}

// newNodeSide builds what serves and reports the node: the node API and
// healthz servers and, when registering, the node status reporter and the
// Lease heartbeat.
func (a *agent) newNodeSide(ctx context.Context, o *options, h host) error {
	var err error
	if a.api, a.apiCert, a.metrics, err = a.newAPIServer(ctx, o, h.nodeIPs); err != nil {
		return fmt.Errorf("node API: %w", err)
	}
	if a.healthz, err = healthzServer(a.cfg); err != nil {
		return err
	}
	if a.client != nil && *a.cfg.RegisterNode {
		return a.newRegistration(o, h.machine)
	}
	return nil
}

// newRegistration builds the node status reporter (registration and
// status) and the Lease heartbeat.
func (a *agent) newRegistration(o *options, machine statusmgr.HostMachine) error {
	cfg := a.cfg
	labels := map[string]string{}
	for k, v := range o.nodeLabels {
		labels[k] = v
	}
	var err error
	a.lease, err = statusmgr.NewHeartbeat(a.client, statusmgr.HeartbeatConfig{NodeName: a.nodeName, LeaseDurationSeconds: cfg.NodeLeaseDurationSeconds})
	if err != nil {
		return err
	}
	a.node, err = statusmgr.NewNodeReporter(a.client, statusmgr.NodeConfig{
		NodeName: a.nodeName, NodeIP: o.nodeIP, Labels: labels, Taints: cfg.RegisterWithTaints,
		MaxPods: int(cfg.MaxPods), Reserved: reserved(cfg), KubeletPort: cfg.Port, Machine: machine, Runtime: a.runtime, Startup: a.metrics,
		Conditions:            a.nodeConditions(),
		DeclaredFeatures:      a.declared,
		Setters:               []statusmgr.StatusSetter{deviceStatus(a.devices), a.runtime, volumesInUse(a.volumes)},
		Annotations:           attachDetachAnnotations(), // attach.go
		Reported:              markVolumesFromNode(a.volumes),
		StatusUpdateFrequency: cfg.NodeStatusUpdateFrequency.Duration,
		StatusReportFrequency: cfg.NodeStatusReportFrequency.Duration,
		// The Node from the informer, as upstream reads its lister first,
		// but from the API server while the Lease fails and for a while
		// after (an outage the watch shared).
		Cached: statusmgr.CachedUnlessFailing(a.informerNode, a.lease, statusmgr.CacheDistrust),
	})
	return err
}

// mountPaths is the loop's MountLister over the volume manager's Mounter.
type mountPaths struct{ m volumemgr.Mounter }

var _ syncloop.MountLister = mountPaths{}

func (p mountPaths) MountPaths(ctx context.Context) ([]string, error) {
	mps, err := p.m.MountPoints(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(mps))
	for i, mp := range mps {
		out[i] = mp.Path
	}
	return out, nil
}
