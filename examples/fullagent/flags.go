package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// options are the command line: kubelet's flags that are not
// configuration, the fullagent-only flags, and the arguments themselves,
// which are parsed a second time over the loaded configuration so that
// kubelet's configuration flags override the files, as kubelet does.
type options struct {
	kubeconfig          string
	bootstrapKubeconfig string
	config              string
	configDir           string
	hostnameOverride    string
	nodeIP              string
	rootDir             string
	certDir             string
	nodeLabels          map[string]string
	// Container GC, as kubelet's (deprecated) flags; the period, fixed at
	// one minute upstream, is a flag here.
	minContainerTTL     time.Duration
	maxDeadPerContainer int
	maxDeadContainers   int
	containerGCPeriod   time.Duration
	// imageGCPeriod is how often image GC runs (fixed at five minutes
	// upstream).
	imageGCPeriod time.Duration
	// sandboxCreations is --max-parallel-sandbox-creations, the runtime's
	// MaxParallelSandboxCreations (0: no bound, as kubelet).
	sandboxCreations int
	// seccompDefault is --seccomp-default: on when it or seccompDefault is.
	seccompDefault bool
	// The image credential provider plugins (--image-credential-provider-config
	// and --image-credential-provider-bin-dir): both or neither.
	credProviderConfig string
	credProviderBinDir string
	// systemBus is the system D-Bus address the systemd cgroup driver and
	// the logind shutdown trigger use: $DBUS_SYSTEM_BUS_ADDRESS, or ""
	// (the system bus). Tests running agents in-process set one of their
	// own, so no agent of theirs reaches the host's systemd or logind.
	systemBus string
	// fullagent-only. logJSON is --log-json, an alias of
	// --logging-format=json.
	logJSON       bool
	podCheckpoint bool
	version       bool
	// refused are the kubelet flags given that nodekit does not implement,
	// "--name=value" (see refusedFlags).
	refused []string
	// args is the command line, re-parsed by applyConfigFlags.
	args []string
}

// refusedFlags are kubelet v1.37 flags outside the configuration that
// nodekit does not implement, with their defaults. They parse (so the
// error can say what nodekit lacks rather than "unknown flag"), and the
// agent refuses to start when one is set to anything but its default.
func refusedFlags() map[string]string {
	return map[string]string{
		"cloud-provider":                           "",
		"lock-file":                                "",
		"exit-on-lock-contention":                  "false",
		"experimental-mounter-path":                "",
		"experimental-allocatable-ignore-eviction": "false",
		"runtime-cgroups":                          "",
		"housekeeping-interval":                    "10s",
	}
}

// deprecatedConfigFlag is kubelet's message for its configuration flags.
const deprecatedConfigFlag = "This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information."

// newFlagSet is the whole command line bound to o and cfg. Output of
// parse errors and deprecation notices goes to out.
func newFlagSet(o *options, cfg *kubeletv1beta1.KubeletConfiguration, out io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("fullagent", pflag.ContinueOnError)
	fs.SetOutput(out)
	// kubelet accepts --a_b for --a-b.
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
	})
	o.bindNodeFlags(fs)
	o.bindAgentFlags(fs)
	addConfigFlags(fs, cfg)
	return fs
}

// parseFlags parses the command line. Unknown flags are errors (pflag's
// "unknown flag: --x"): a flag that is not kubelet's or fullagent's is a
// typo or a kubelet flag removed before v1.37.
func parseFlags(args []string, out io.Writer) (*options, error) {
	o := &options{args: args, systemBus: systemdBus(os.Getenv)}
	fs := newFlagSet(o, &kubeletv1beta1.KubeletConfiguration{}, out)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unknown command %q: fullagent takes flags only", fs.Arg(0))
	}
	if o.sandboxCreations < 0 {
		return nil, fmt.Errorf("--max-parallel-sandbox-creations=%d: want 0 (no bound) or more", o.sandboxCreations)
	}
	defaults := refusedFlags()
	fs.Visit(func(f *pflag.Flag) {
		if def, ok := defaults[f.Name]; ok && f.Value.String() != def {
			o.refused = append(o.refused, "--"+f.Name+"="+f.Value.String())
		}
	})
	sort.Strings(o.refused)
	return o, nil
}

// applyConfigFlags sets the configuration flags of the command line over
// cfg (loaded from the files): a flag wins over the files, and
// --feature-gates merges with featureGates, a gate on the command line
// winning. The other flags are parsed into a throwaway copy.
func (o *options) applyConfigFlags(cfg *kubeletv1beta1.KubeletConfiguration) error {
	if len(o.args) == 0 {
		return nil
	}
	// Binding resets the split-stream booleans (logsapi.AddFlags binds
	// them with a false default); the files' values stay unless a flag
	// sets them.
	text, js := cfg.Logging.Options.Text.SplitStream, cfg.Logging.Options.JSON.SplitStream
	fs := newFlagSet(&options{}, cfg, io.Discard) // notices were printed by the first parse
	if err := fs.Parse(o.args); err != nil {
		return err
	}
	if !fs.Changed("log-text-split-stream") {
		cfg.Logging.Options.Text.SplitStream = text
	}
	if !fs.Changed("log-json-split-stream") {
		cfg.Logging.Options.JSON.SplitStream = js
	}
	return applyLogJSON(fs, o.logJSON, cfg)
}

// checkRefusedFlags is the start-up error for kubelet flags nodekit does
// not implement.
func (o *options) checkRefusedFlags() error {
	if len(o.refused) == 0 {
		return nil
	}
	return fmt.Errorf("%s: kubelet flag(s) not supported by nodekit (only their defaults are)", strings.Join(o.refused, ", "))
}

// bindNodeFlags binds kubelet's flags that are not configuration.
func (o *options) bindNodeFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.config, "config", "", "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1); command-line flags override it")
	fs.StringVar(&o.configDir, "config-dir", "", "directory of drop-in KubeletConfiguration files (*.conf, subdirectories included, in lexical order) merged over --config")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the node's identity; empty runs standalone (static pods only)")
	fs.StringVar(&o.bootstrapKubeconfig, "bootstrap-kubeconfig", "", "kubeconfig with bootstrap credentials (a bootstrap token), used to request the node's client certificate "+
		"(CSR, signer kubernetes.io/kube-apiserver-client-kubelet) when --kubeconfig has no valid one; --kubeconfig is then written")
	fs.StringVar(&o.hostnameOverride, "hostname-override", "", "node name to use instead of the hostname")
	fs.StringVar(&o.nodeIP, "node-ip", "", "the node's IP address")
	fs.StringVar(&o.certDir, "cert-dir", "", "directory of the node's client certificates (default ROOT-DIR/pki)")
	fs.StringVar(&o.rootDir, "root-dir", "/var/lib/kubelet", "directory for pod directories and checkpoints")
	fs.Var(&stringMap{m: &o.nodeLabels, sep: "=", split: true}, "node-labels", "labels to add when registering the node: key=value,...")
	fs.DurationVar(&o.minContainerTTL, "minimum-container-ttl-duration", 0, "minimum age of a dead container before garbage collection")
	fs.IntVar(&o.maxDeadPerContainer, "maximum-dead-containers-per-container", 1, "dead instances of one container to keep; negative keeps all")
	fs.IntVar(&o.maxDeadContainers, "maximum-dead-containers", -1, "dead containers to keep on the node; negative keeps all")
	for _, name := range []string{"minimum-container-ttl-duration", "maximum-dead-containers-per-container", "maximum-dead-containers"} {
		_ = fs.MarkDeprecated(name, "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.")
	}
	fs.String("pod-infra-container-image", "", "ignored: the runtime chooses (and pins) its sandbox image")
	_ = fs.MarkDeprecated("pod-infra-container-image", "it has no effect: the sandbox image is the container runtime's setting (kubelet removed the flag in v1.35; kubeadm-flags.env files of older nodes still pass it)")
	usage := map[string]string{}
	for name, def := range refusedFlags() {
		usage[name] = "kubelet's; not supported by nodekit: the agent refuses to start unless it is " + fmt.Sprintf("%q", def)
	}
	fs.String("cloud-provider", "", usage["cloud-provider"])
	fs.String("lock-file", "", usage["lock-file"])
	fs.Bool("exit-on-lock-contention", false, usage["exit-on-lock-contention"])
	fs.String("experimental-mounter-path", "", usage["experimental-mounter-path"])
	fs.Bool("experimental-allocatable-ignore-eviction", false, usage["experimental-allocatable-ignore-eviction"])
	fs.String("runtime-cgroups", "", usage["runtime-cgroups"])
	fs.StringVar(&o.credProviderConfig, "image-credential-provider-config", "", "path to a credential provider plugin config file (JSON/YAML/YML, kubelet.config.k8s.io/v1 CredentialProviderConfig) "+
		"or a directory of such files (merged in lexical order; non-recursive); needs --image-credential-provider-bin-dir")
	fs.StringVar(&o.credProviderBinDir, "image-credential-provider-bin-dir", "", "directory of the credential provider plugin binaries")
	fs.BoolVar(&o.seccompDefault, "seccomp-default", false, "RuntimeDefault seccomp for every container without a profile (or seccompDefault)")
	fs.Duration("housekeeping-interval", 10*time.Second, usage["housekeeping-interval"])
}

// bindAgentFlags binds fullagent's own flags.
func (o *options) bindAgentFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.containerGCPeriod, "container-gc-period", time.Minute, "how often dead containers are garbage collected (fullagent's; fixed at 1m in kubelet)")
	fs.DurationVar(&o.imageGCPeriod, "image-gc-period", 5*time.Minute, "how often unused images are garbage collected (fullagent's; fixed at 5m in kubelet)")
	fs.IntVar(&o.sandboxCreations, "max-parallel-sandbox-creations", 2*runtime.NumCPU(), "how many pod sandboxes the runtime is asked to create at once; "+
		"more new pods wait their turn (a call still in progress after 5s stops counting). 0: no bound, as kubelet (fullagent's; default twice the CPUs)")
	fs.BoolVar(&o.logJSON, "log-json", false, "an alias of --logging-format=json (fullagent's, kept for older command lines)")
	fs.BoolVar(&o.podCheckpoint, "pod-checkpoint", false, "keep a checkpoint of this node's pods, the ConfigMaps, Secrets and Services they use and the Node in ROOT-DIR/pod_checkpoint "+
		"(mode 0600: it holds Secrets in clear), and run the pods from it when the agent starts and the API server does not answer within 10s; "+
		"when it answers, pods deleted meanwhile are stopped. A corrupt checkpoint is reported and ignored (fullagent's)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
}

// isHelp reports whether parseFlags stopped at --help (usage printed).
func isHelp(err error) bool { return errors.Is(err, pflag.ErrHelp) }

// addConfigFlags binds kubelet v1.37's configuration flags to cfg, with
// kubelet's names, types and deprecation (all but -v, --vmodule,
// --log-flush-frequency, --provider-id and --fail-cgroupv1 are deprecated
// in favour of the file).
func addConfigFlags(main *pflag.FlagSet, c *kubeletv1beta1.KubeletConfiguration) {
	b := configFlags{fs: pflag.NewFlagSet("config", pflag.ContinueOnError)}
	b.serverFlags(c)
	b.nodeFlags(c)
	b.resourceFlags(c)
	notDeprecated := map[string]bool{"v": true, "vmodule": true, "log-flush-frequency": true, "provider-id": true, "fail-cgroupv1": true}
	b.fs.VisitAll(func(f *pflag.Flag) {
		if !notDeprecated[f.Name] {
			f.Deprecated = deprecatedConfigFlag
		}
	})
	main.AddFlagSet(b.fs)
}

// configFlags registers configuration flags on fs.
type configFlags struct{ fs *pflag.FlagSet }

// boolP binds an optional bool; --name alone means true.
func (b configFlags) boolP(p **bool, name, usage string) {
	b.fs.Var(boolPtr{p}, name, usage)
	b.fs.Lookup(name).NoOptDefVal = "true"
}

func (b configFlags) i32P(p **int32, name, usage string) { b.fs.Var(int32Ptr{p}, name, usage) }

// m binds key=value,... replacing the file's map on first use.
func (b configFlags) m(p *map[string]string, name, usage string) {
	b.fs.Var(&stringMap{m: p, sep: "=", split: true}, name, usage)
}

// serverFlags: the pod sources, the node API and its authentication.
func (b configFlags) serverFlags(c *kubeletv1beta1.KubeletConfiguration) {
	b.boolP(&c.EnableServer, "enable-server", "enable the kubelet's server")
	b.boolP(&c.FailSwapOn, "fail-swap-on", "fail to start if swap is enabled")
	b.fs.StringVar(&c.StaticPodPath, "pod-manifest-path", c.StaticPodPath, "staticPodPath")
	b.fs.DurationVar(&c.SyncFrequency.Duration, "sync-frequency", c.SyncFrequency.Duration, "syncFrequency")
	b.fs.DurationVar(&c.FileCheckFrequency.Duration, "file-check-frequency", c.FileCheckFrequency.Duration, "fileCheckFrequency")
	b.fs.DurationVar(&c.HTTPCheckFrequency.Duration, "http-check-frequency", c.HTTPCheckFrequency.Duration, "httpCheckFrequency")
	b.fs.StringVar(&c.StaticPodURL, "manifest-url", c.StaticPodURL, "staticPodURL")
	b.fs.Var(&headerMap{m: &c.StaticPodURLHeader}, "manifest-url-header", "staticPodURLHeader: name:value,...")
	b.fs.Var(ipString{&c.Address}, "address", "address to serve on")
	b.fs.Int32Var(&c.Port, "port", c.Port, "port")
	b.fs.Int32Var(&c.ReadOnlyPort, "read-only-port", c.ReadOnlyPort, "readOnlyPort")
	b.boolP(&c.FailCgroupV1, "fail-cgroupv1", "failCgroupV1")
	b.fs.StringVar(&c.ContainerRuntimeEndpoint, "container-runtime-endpoint", c.ContainerRuntimeEndpoint, "containerRuntimeEndpoint")
	b.fs.StringVar(&c.ImageServiceEndpoint, "image-service-endpoint", c.ImageServiceEndpoint, "imageServiceEndpoint")
	b.boolP(&c.Authentication.Anonymous.Enabled, "anonymous-auth", "authentication.anonymous.enabled")
	b.boolP(&c.Authentication.Webhook.Enabled, "authentication-token-webhook", "authentication.webhook.enabled")
	b.fs.DurationVar(&c.Authentication.Webhook.CacheTTL.Duration, "authentication-token-webhook-cache-ttl", c.Authentication.Webhook.CacheTTL.Duration, "authentication.webhook.cacheTTL")
	b.fs.StringVar(&c.Authentication.X509.ClientCAFile, "client-ca-file", c.Authentication.X509.ClientCAFile, "authentication.x509.clientCAFile")
	b.fs.StringVar((*string)(&c.Authorization.Mode), "authorization-mode", string(c.Authorization.Mode), "authorization.mode: AlwaysAllow or Webhook")
	b.fs.DurationVar(&c.Authorization.Webhook.CacheAuthorizedTTL.Duration, "authorization-webhook-cache-authorized-ttl", c.Authorization.Webhook.CacheAuthorizedTTL.Duration, "authorization.webhook.cacheAuthorizedTTL")
	b.fs.DurationVar(&c.Authorization.Webhook.CacheUnauthorizedTTL.Duration, "authorization-webhook-cache-unauthorized-ttl", c.Authorization.Webhook.CacheUnauthorizedTTL.Duration, "authorization.webhook.cacheUnauthorizedTTL")
	b.fs.StringVar(&c.TLSCertFile, "tls-cert-file", c.TLSCertFile, "tlsCertFile")
	b.fs.StringVar(&c.TLSPrivateKeyFile, "tls-private-key-file", c.TLSPrivateKeyFile, "tlsPrivateKeyFile")
	b.fs.BoolVar(&c.ServerTLSBootstrap, "rotate-server-certificates", c.ServerTLSBootstrap, "serverTLSBootstrap")
	b.fs.StringSliceVar(&c.TLSCipherSuites, "tls-cipher-suites", c.TLSCipherSuites, "tlsCipherSuites")
	b.fs.StringVar(&c.TLSMinVersion, "tls-min-version", c.TLSMinVersion, "tlsMinVersion")
	b.fs.BoolVar(&c.RotateCertificates, "rotate-certificates", c.RotateCertificates, "rotateCertificates")
}

// nodeFlags: API clients, status, images, feature gates and cgroup names.
func (b configFlags) nodeFlags(c *kubeletv1beta1.KubeletConfiguration) {
	b.i32P(&c.RegistryPullQPS, "registry-qps", "registryPullQPS")
	b.fs.Int32Var(&c.RegistryBurst, "registry-burst", c.RegistryBurst, "registryBurst")
	b.i32P(&c.EventRecordQPS, "event-qps", "eventRecordQPS")
	b.fs.Int32Var(&c.EventBurst, "event-burst", c.EventBurst, "eventBurst")
	b.boolP(&c.EnableDebuggingHandlers, "enable-debugging-handlers", "enableDebuggingHandlers")
	b.fs.BoolVar(&c.EnableContentionProfiling, "contention-profiling", c.EnableContentionProfiling, "enableContentionProfiling")
	b.i32P(&c.HealthzPort, "healthz-port", "healthzPort")
	b.fs.Var(ipString{&c.HealthzBindAddress}, "healthz-bind-address", "healthzBindAddress")
	b.i32P(&c.OOMScoreAdj, "oom-score-adj", "oomScoreAdj")
	b.fs.StringVar(&c.ClusterDomain, "cluster-domain", c.ClusterDomain, "clusterDomain")
	b.fs.StringVar(&c.VolumePluginDir, "volume-plugin-dir", c.VolumePluginDir, "volumePluginDir")
	b.fs.StringSliceVar(&c.ClusterDNS, "cluster-dns", c.ClusterDNS, "clusterDNS")
	b.fs.DurationVar(&c.StreamingConnectionIdleTimeout.Duration, "streaming-connection-idle-timeout", c.StreamingConnectionIdleTimeout.Duration, "streamingConnectionIdleTimeout")
	b.fs.DurationVar(&c.NodeStatusUpdateFrequency.Duration, "node-status-update-frequency", c.NodeStatusUpdateFrequency.Duration, "nodeStatusUpdateFrequency")
	b.fs.DurationVar(&c.ImageMinimumGCAge.Duration, "minimum-image-ttl-duration", c.ImageMinimumGCAge.Duration, "imageMinimumGCAge")
	b.i32P(&c.ImageGCHighThresholdPercent, "image-gc-high-threshold", "imageGCHighThresholdPercent")
	b.i32P(&c.ImageGCLowThresholdPercent, "image-gc-low-threshold", "imageGCLowThresholdPercent")
	b.fs.DurationVar(&c.VolumeStatsAggPeriod.Duration, "volume-stats-agg-period", c.VolumeStatsAggPeriod.Duration, "volumeStatsAggPeriod")
	b.fs.Var(gateMap{&c.FeatureGates}, "feature-gates", "featureGates: Name=true|false,... (kubelet v1.37's gates)")
	b.fs.StringVar(&c.KubeletCgroups, "kubelet-cgroups", c.KubeletCgroups, "kubeletCgroups")
	b.fs.StringVar(&c.SystemCgroups, "system-cgroups", c.SystemCgroups, "systemCgroups")
	b.fs.StringVar(&c.ProviderID, "provider-id", c.ProviderID, "providerID")
}

// resourceFlags: cgroups, resource managers, eviction, logging and registration.
func (b configFlags) resourceFlags(c *kubeletv1beta1.KubeletConfiguration) {
	b.boolP(&c.CgroupsPerQOS, "cgroups-per-qos", "cgroupsPerQOS")
	b.fs.StringVar(&c.CgroupDriver, "cgroup-driver", c.CgroupDriver, "cgroupDriver: cgroupfs or systemd")
	b.fs.StringVar(&c.CgroupRoot, "cgroup-root", c.CgroupRoot, "cgroupRoot")
	b.fs.StringVar(&c.CPUManagerPolicy, "cpu-manager-policy", c.CPUManagerPolicy, "cpuManagerPolicy")
	b.fs.Var(&stringMap{m: &c.CPUManagerPolicyOptions, sep: "="}, "cpu-manager-policy-options", "cpuManagerPolicyOptions: key=value")
	b.fs.DurationVar(&c.CPUManagerReconcilePeriod.Duration, "cpu-manager-reconcile-period", c.CPUManagerReconcilePeriod.Duration, "cpuManagerReconcilePeriod")
	b.m(&c.QOSReserved, "qos-reserved", "qosReserved: resource=percentage,...")
	b.fs.StringVar(&c.TopologyManagerPolicy, "topology-manager-policy", c.TopologyManagerPolicy, "topologyManagerPolicy")
	b.fs.DurationVar(&c.RuntimeRequestTimeout.Duration, "runtime-request-timeout", c.RuntimeRequestTimeout.Duration, "runtimeRequestTimeout")
	b.fs.StringVar(&c.HairpinMode, "hairpin-mode", c.HairpinMode, "hairpinMode")
	b.fs.Int32Var(&c.MaxPods, "max-pods", c.MaxPods, "maxPods")
	b.fs.StringVar(&c.PodCIDR, "pod-cidr", c.PodCIDR, "podCIDR")
	b.fs.Var(int64Ptr{&c.PodPidsLimit}, "pod-max-pids", "podPidsLimit")
	b.fs.Var(stringPtr{&c.ResolverConfig}, "resolv-conf", "resolvConf")
	b.fs.BoolVar(&c.RunOnce, "runonce", c.RunOnce, "runOnce")
	b.boolP(&c.CPUCFSQuota, "cpu-cfs-quota", "cpuCFSQuota")
	b.fs.Var(durationPtr{&c.CPUCFSQuotaPeriod}, "cpu-cfs-quota-period", "cpuCFSQuotaPeriod")
	b.boolP(&c.EnableControllerAttachDetach, "enable-controller-attach-detach", "enableControllerAttachDetach")
	b.boolP(&c.MakeIPTablesUtilChains, "make-iptables-util-chains", "makeIPTablesUtilChains")
	b.fs.StringVar(&c.ContainerLogMaxSize, "container-log-max-size", c.ContainerLogMaxSize, "containerLogMaxSize")
	b.i32P(&c.ContainerLogMaxFiles, "container-log-max-files", "containerLogMaxFiles")
	b.fs.StringSliceVar(&c.AllowedUnsafeSysctls, "allowed-unsafe-sysctls", c.AllowedUnsafeSysctls, "allowedUnsafeSysctls")
	b.i32P(&c.NodeStatusMaxImages, "node-status-max-images", "nodeStatusMaxImages")
	b.fs.BoolVar(&c.KernelMemcgNotification, "kernel-memcg-notification", c.KernelMemcgNotification, "kernelMemcgNotification")
	b.boolP(&c.LocalStorageCapacityIsolation, "local-storage-capacity-isolation", "localStorageCapacityIsolation")
	b.fs.Int64Var(&c.MaxOpenFiles, "max-open-files", c.MaxOpenFiles, "maxOpenFiles")
	b.fs.StringVar(&c.ContentType, "kube-api-content-type", c.ContentType, "contentType")
	b.i32P(&c.KubeAPIQPS, "kube-api-qps", "kubeAPIQPS")
	b.fs.Int32Var(&c.KubeAPIBurst, "kube-api-burst", c.KubeAPIBurst, "kubeAPIBurst")
	b.boolP(&c.SerializeImagePulls, "serialize-image-pulls", "serializeImagePulls")
	b.fs.Var(&stringMap{m: &c.EvictionHard, sep: "<", split: true}, "eviction-hard", "evictionHard: signal<quantity,...")
	b.fs.Var(&stringMap{m: &c.EvictionSoft, sep: "<", split: true}, "eviction-soft", "evictionSoft: signal<quantity,...")
	b.m(&c.EvictionSoftGracePeriod, "eviction-soft-grace-period", "evictionSoftGracePeriod: signal=duration,...")
	b.fs.DurationVar(&c.EvictionPressureTransitionPeriod.Duration, "eviction-pressure-transition-period", c.EvictionPressureTransitionPeriod.Duration, "evictionPressureTransitionPeriod")
	b.fs.Int32Var(&c.EvictionMaxPodGracePeriod, "eviction-max-pod-grace-period", c.EvictionMaxPodGracePeriod, "evictionMaxPodGracePeriod")
	b.m(&c.EvictionMinimumReclaim, "eviction-minimum-reclaim", "evictionMinimumReclaim: signal=quantity,...")
	b.fs.Int32Var(&c.PodsPerCore, "pods-per-core", c.PodsPerCore, "podsPerCore")
	b.fs.BoolVar(&c.ProtectKernelDefaults, "protect-kernel-defaults", c.ProtectKernelDefaults, "protectKernelDefaults")
	b.fs.StringVar(&c.ReservedSystemCPUs, "reserved-cpus", c.ReservedSystemCPUs, "reservedSystemCPUs")
	b.fs.StringVar(&c.TopologyManagerScope, "topology-manager-scope", c.TopologyManagerScope, "topologyManagerScope")
	b.m(&c.TopologyManagerPolicyOptions, "topology-manager-policy-options", "topologyManagerPolicyOptions: key=value,...")
	b.m(&c.SystemReserved, "system-reserved", "systemReserved: resource=quantity,...")
	b.m(&c.KubeReserved, "kube-reserved", "kubeReserved: resource=quantity,...")
	b.fs.StringSliceVar(&c.EnforceNodeAllocatable, "enforce-node-allocatable", c.EnforceNodeAllocatable, "enforceNodeAllocatable")
	b.fs.StringVar(&c.SystemReservedCgroup, "system-reserved-cgroup", c.SystemReservedCgroup, "systemReservedCgroup")
	b.fs.StringVar(&c.KubeReservedCgroup, "kube-reserved-cgroup", c.KubeReservedCgroup, "kubeReservedCgroup")
	logsapi.AddFlags(&c.Logging, b.fs) // --logging-format, -v, --vmodule, --log-flush-frequency, ...
	b.fs.StringVar(&c.MemoryManagerPolicy, "memory-manager-policy", c.MemoryManagerPolicy, "memoryManagerPolicy: None or Static")
	b.fs.Var(&reservedMemory{r: &c.ReservedMemory}, "reserved-memory", "reservedMemory: NUMA:name=quantity,...")
	b.boolP(&c.RegisterNode, "register-node", "registerNode")
	b.fs.Var(&taintList{t: &c.RegisterWithTaints}, "register-with-taints", "registerWithTaints: key=value:Effect,...")
}
