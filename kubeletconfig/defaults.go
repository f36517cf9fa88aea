package kubeletconfig

import (
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// DefaultEvictionHard is kubelet's evictionHard on Linux when a
// configuration file leaves it out.
func DefaultEvictionHard() map[string]string {
	return map[string]string{
		"memory.available":   "100Mi",
		"nodefs.available":   "10%",
		"nodefs.inodesFree":  "5%",
		"imagefs.available":  "15%",
		"imagefs.inodesFree": "5%",
	}
}

// SetDefaults fills every unset field with kubelet v1.37's v1beta1
// default (and evictionHard as kubelet's file loading does: the Linux
// defaults when absent, merged under it with mergeDefaultEvictionSettings).
// Defaults that depend on a feature gate read c.FeatureGates, so an
// unknown gate is an error. It is idempotent.
func SetDefaults(c *kubeletv1beta1.KubeletConfiguration) error {
	gates, err := newGates(logr.Discard(), c.FeatureGates) // the caller's NewGates logs
	if err != nil {
		return err
	}
	setServerDefaults(c)
	setTimingDefaults(c)
	setResourceDefaults(c)
	setMiscDefaults(c)
	if gates.Enabled(gateCrashLoopBackOffMax) && c.CrashLoopBackOff.MaxContainerRestartPeriod == nil {
		c.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: 300 * time.Second}
	}
	if gates.Enabled(gateEnsureSecretPulledImages) && c.ImagePullCredentialsVerificationPolicy == "" {
		c.ImagePullCredentialsVerificationPolicy = kubeletv1beta1.NeverVerifyPreloadedImages
	}
	return nil
}

func setDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

func setPtr[T any](p **T, def T) {
	if *p == nil {
		*p = ptr.To(def)
	}
}

func setZero[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// setServerDefaults: the node API, its authentication and authorization.
func setServerDefaults(c *kubeletv1beta1.KubeletConfiguration) {
	setPtr(&c.EnableServer, true)
	setZero(&c.Address, "0.0.0.0")
	setZero(&c.Port, 10250)
	setPtr(&c.Authentication.Anonymous.Enabled, false)
	setPtr(&c.Authentication.Webhook.Enabled, true)
	setDuration(&c.Authentication.Webhook.CacheTTL, 2*time.Minute)
	setZero(&c.Authorization.Mode, kubeletv1beta1.KubeletAuthorizationModeWebhook)
	setDuration(&c.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	setDuration(&c.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	setPtr(&c.EnableDebuggingHandlers, true)
	setPtr[int32](&c.HealthzPort, 10248)
	setZero(&c.HealthzBindAddress, "127.0.0.1")
	setDuration(&c.StreamingConnectionIdleTimeout, 4*time.Hour)
	setPtr(&c.EnableSystemLogHandler, true)
	setPtr(&c.EnableProfilingHandler, true)
	setPtr(&c.EnableDebugFlagsHandler, true)
}

// setTimingDefaults: periods and timeouts.
func setTimingDefaults(c *kubeletv1beta1.KubeletConfiguration) {
	setDuration(&c.SyncFrequency, time.Minute)
	setDuration(&c.FileCheckFrequency, 20*time.Second)
	setDuration(&c.HTTPCheckFrequency, 20*time.Second)
	// An unset report frequency follows a set update frequency.
	if c.NodeStatusReportFrequency.Duration == 0 {
		c.NodeStatusReportFrequency = c.NodeStatusUpdateFrequency
		setDuration(&c.NodeStatusReportFrequency, 5*time.Minute)
	}
	setDuration(&c.NodeStatusUpdateFrequency, 10*time.Second)
	setZero(&c.NodeLeaseDurationSeconds, 40)
	setDuration(&c.ImageMinimumGCAge, 2*time.Minute)
	setDuration(&c.VolumeStatsAggPeriod, time.Minute)
	setDuration(&c.CPUManagerReconcilePeriod, 10*time.Second)
	setDuration(&c.RuntimeRequestTimeout, 2*time.Minute)
	setDuration(&c.EvictionPressureTransitionPeriod, 5*time.Minute)
	setPtr(&c.CPUCFSQuotaPeriod, metav1.Duration{Duration: 100 * time.Millisecond})
	setPtr(&c.ContainerLogMonitorInterval, metav1.Duration{Duration: 10 * time.Second})
}

// setResourceDefaults: pods, cgroups, resource managers, eviction, GC.
func setResourceDefaults(c *kubeletv1beta1.KubeletConfiguration) {
	setPtr[int32](&c.ImageGCHighThresholdPercent, 85)
	setPtr[int32](&c.ImageGCLowThresholdPercent, 80)
	setPtr(&c.CgroupsPerQOS, true)
	setZero(&c.CgroupDriver, "cgroupfs")
	setZero(&c.CPUManagerPolicy, "none")
	setZero(&c.MemoryManagerPolicy, kubeletv1beta1.NoneMemoryManagerPolicy)
	setZero(&c.TopologyManagerPolicy, kubeletv1beta1.NoneTopologyManagerPolicy)
	setZero(&c.TopologyManagerScope, kubeletv1beta1.ContainerTopologyManagerScope)
	setZero(&c.MaxPods, 110)
	if c.PodPidsLimit == nil || *c.PodPidsLimit < 0 {
		c.PodPidsLimit = ptr.To[int64](-1)
	}
	setPtr(&c.CPUCFSQuota, true)
	setZero(&c.MaxOpenFiles, 1000000)
	if c.EnforceNodeAllocatable == nil {
		c.EnforceNodeAllocatable = []string{"pods"}
	}
	setPtr(&c.MergeDefaultEvictionSettings, false)
	if c.EvictionHard == nil {
		c.EvictionHard = DefaultEvictionHard()
	} else if *c.MergeDefaultEvictionSettings {
		for k, v := range DefaultEvictionHard() {
			if _, ok := c.EvictionHard[k]; !ok {
				c.EvictionHard[k] = v
			}
		}
	}
	setPtr(&c.FailSwapOn, true)
	setPtr(&c.FailCgroupV1, true)
	setZero(&c.MemoryReservationPolicy, kubeletv1beta1.NoneMemoryReservationPolicy)
	setPtr(&c.LocalStorageCapacityIsolation, true)
	setPtr(&c.SeccompDefault, false)
}

// setMiscDefaults: API clients, images, logs, networking, paths.
func setMiscDefaults(c *kubeletv1beta1.KubeletConfiguration) {
	setPtr[int32](&c.RegistryPullQPS, 5)
	setZero(&c.RegistryBurst, 10)
	setPtr[int32](&c.EventRecordQPS, 50)
	setZero(&c.EventBurst, 100)
	setPtr[int32](&c.OOMScoreAdj, -999)
	setZero(&c.HairpinMode, kubeletv1beta1.PromiscuousBridge)
	setPtr(&c.ResolverConfig, "/etc/resolv.conf")
	setPtr[int32](&c.NodeStatusMaxImages, 50)
	setZero(&c.ContentType, "application/vnd.kubernetes.protobuf")
	setPtr[int32](&c.KubeAPIQPS, 50)
	setZero(&c.KubeAPIBurst, 100)
	if c.SerializeImagePulls == nil {
		c.SerializeImagePulls = ptr.To(c.MaxParallelImagePulls == nil || *c.MaxParallelImagePulls < 2)
	}
	setPtr(&c.EnableControllerAttachDetach, true)
	setPtr(&c.MakeIPTablesUtilChains, true)
	setPtr[int32](&c.IPTablesMasqueradeBit, 14)
	setPtr[int32](&c.IPTablesDropBit, 15)
	setZero(&c.ContainerLogMaxSize, "10Mi")
	setPtr[int32](&c.ContainerLogMaxFiles, 5)
	setPtr[int32](&c.ContainerLogMaxWorkers, 1)
	setZero(&c.ConfigMapAndSecretChangeDetectionStrategy, kubeletv1beta1.WatchChangeDetectionStrategy)
	setZero(&c.VolumePluginDir, "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/")
	logsapi.SetRecommendedLoggingConfiguration(&c.Logging)
	setPtr(&c.RegisterNode, true)
	setZero(&c.ContainerRuntimeEndpoint, "unix:///run/containerd/containerd.sock")
	setZero(&c.PodLogsDir, "/var/log/pods")
}
