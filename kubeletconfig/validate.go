package kubeletconfig

import (
	"fmt"
	"math"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"
)

// Validate checks a defaulted configuration with kubelet v1.37's rules
// (pkg/kubelet/apis/config/validation) plus the parse checks kubelet makes
// later at start-up (quantities, IPs), against gates (from NewGates). It
// returns every problem at once, each naming the field
// ("maxPods: Invalid value: -1: must not be negative"), or nil.
func Validate(c *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) error {
	v := &validator{c: c, gates: gates}
	v.ports()
	v.numbers()
	v.imageGC()
	v.features()
	v.shutdown()
	v.allocatable()
	v.enums()
	v.images()
	v.logs()
	v.resources()
	v.misc()
	v.userNamespaces()
	return v.errs.ToAggregate()
}

type validator struct {
	c     *kubeletv1beta1.KubeletConfiguration
	gates featuregate.FeatureGate
	errs  field.ErrorList
}

func (v *validator) invalid(path string, value any, msg string) {
	v.errs = append(v.errs, field.Invalid(field.NewPath(path), value, msg))
}

func (v *validator) forbidden(path, msg string) {
	v.errs = append(v.errs, field.Forbidden(field.NewPath(path), msg))
}

func i32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func (v *validator) port(path string, p int32, zeroOK bool) {
	if zeroOK && p == 0 {
		return
	}
	if len(validation.IsValidPortNum(int(p))) > 0 {
		v.invalid(path, p, "must be between 1 and 65535, inclusive")
	}
}

func (v *validator) ports() {
	c := v.c
	v.port("port", c.Port, false)
	v.port("readOnlyPort", c.ReadOnlyPort, true)
	v.port("healthzPort", i32(c.HealthzPort), true)
	for path, addr := range map[string]string{"address": c.Address, "healthzBindAddress": c.HealthzBindAddress} {
		if addr != "" && net.ParseIP(addr) == nil {
			v.invalid(path, addr, "must be an IP address")
		}
	}
}

func (v *validator) nonNegative(path string, n int64) {
	if n < 0 {
		v.invalid(path, n, "must not be negative")
	}
}

func (v *validator) numbers() {
	c := v.c
	if c.NodeLeaseDurationSeconds <= 0 {
		v.invalid("nodeLeaseDurationSeconds", c.NodeLeaseDurationSeconds, "must be greater than 0")
	}
	v.nonNegative("eventBurst", int64(c.EventBurst))
	v.nonNegative("eventRecordQPS", int64(i32(c.EventRecordQPS)))
	v.nonNegative("kubeAPIBurst", int64(c.KubeAPIBurst))
	v.nonNegative("kubeAPIQPS", int64(i32(c.KubeAPIQPS)))
	v.nonNegative("maxOpenFiles", c.MaxOpenFiles)
	v.nonNegative("maxPods", int64(c.MaxPods))
	v.nonNegative("podsPerCore", int64(c.PodsPerCore))
	v.nonNegative("registryBurst", int64(c.RegistryBurst))
	v.nonNegative("registryPullQPS", int64(i32(c.RegistryPullQPS)))
	if n := i32(c.NodeStatusMaxImages); n < -1 {
		v.invalid("nodeStatusMaxImages", n, "must be -1 or greater")
	}
	if n := i32(c.OOMScoreAdj); n < -1000 || n > 1000 {
		v.invalid("oomScoreAdj", n, "must be between -1000 and 1000, inclusive")
	}
	for path, bit := range map[string]int32{"iptablesDropBit": i32(c.IPTablesDropBit), "iptablesMasqueradeBit": i32(c.IPTablesMasqueradeBit)} {
		if bit < 0 || bit > 31 {
			v.invalid(path, bit, "must be between 0 and 31, inclusive")
		}
	}
	for path, d := range map[string]time.Duration{
		"syncFrequency": c.SyncFrequency.Duration, "fileCheckFrequency": c.FileCheckFrequency.Duration,
		"httpCheckFrequency": c.HTTPCheckFrequency.Duration, "nodeStatusUpdateFrequency": c.NodeStatusUpdateFrequency.Duration,
		"nodeStatusReportFrequency": c.NodeStatusReportFrequency.Duration, "runtimeRequestTimeout": c.RuntimeRequestTimeout.Duration,
		"imageMinimumGCAge": c.ImageMinimumGCAge.Duration, "imageMaximumGCAge": c.ImageMaximumGCAge.Duration,
	} {
		if d < 0 {
			v.invalid(path, d.String(), "must not be negative")
		}
	}
}

func (v *validator) imageGC() {
	c := v.c
	high, low := i32(c.ImageGCHighThresholdPercent), i32(c.ImageGCLowThresholdPercent)
	if high < 0 || high > 100 {
		v.invalid("imageGCHighThresholdPercent", high, "must be between 0 and 100, inclusive")
	}
	if low < 0 || low > 100 {
		v.invalid("imageGCLowThresholdPercent", low, "must be between 0 and 100, inclusive")
	}
	if low >= high {
		v.invalid("imageGCLowThresholdPercent", low, fmt.Sprintf("must be less than imageGCHighThresholdPercent (%d)", high))
	}
	if max, min := c.ImageMaximumGCAge.Duration, c.ImageMinimumGCAge.Duration; max > 0 && max <= min {
		v.invalid("imageMaximumGCAge", max.String(), fmt.Sprintf("must be greater than imageMinimumGCAge (%v)", min))
	}
}

// features: fields that need a feature gate.
func (v *validator) features() {
	c, on := v.c, v.gates.Enabled
	period := c.CPUCFSQuotaPeriod
	if !on(gateCPUCFSQuotaPeriod) && period != nil && period.Duration != 100*time.Millisecond {
		v.forbidden("cpuCFSQuotaPeriod", "a value other than 100ms requires feature gate CustomCPUCFSQuotaPeriod")
	}
	if on(gateCPUCFSQuotaPeriod) && period != nil && (period.Duration < time.Millisecond || period.Duration > time.Second) {
		v.invalid("cpuCFSQuotaPeriod", period.Duration.String(), "must be between 1ms and 1s, inclusive")
	}
	if c.ImageMaximumGCAge.Duration != 0 && !on(gateImageMaximumGCAge) {
		v.forbidden("imageMaximumGCAge", "requires feature gate ImageMaximumGCAge")
	}
	if len(c.DefaultPodSysctls) > 0 && !on(gateDefaultPodSysctls) {
		v.forbidden("defaultPodSysctls", "requires feature gate DefaultPodSysctls")
	}
	for name := range c.DefaultPodSysctls {
		if !sysctlName.MatchString(name) || len(name) > 253 {
			v.invalid("defaultPodSysctls["+name+"]", name, "is not a valid sysctl name")
		}
	}
	if c.ServerTLSBootstrap && !on(gateRotateServerCertificate) {
		v.forbidden("serverTLSBootstrap", "requires feature gate RotateKubeletServerCertificate")
	}
	if c.RunOnce {
		v.forbidden("runOnce", "run-once mode is deprecated and must not be set")
	}
	if !on(gateNodeSwap) && c.MemorySwap != (kubeletv1beta1.MemorySwapConfiguration{}) {
		v.forbidden("memorySwap.swapBehavior", "cannot be set when feature gate NodeSwap is disabled")
	}
	switch c.MemorySwap.SwapBehavior {
	case "", "NoSwap", "LimitedSwap":
	default:
		v.errs = append(v.errs, field.NotSupported(field.NewPath("memorySwap", "swapBehavior"), c.MemorySwap.SwapBehavior, []string{"", "NoSwap", "LimitedSwap"}))
	}
	max := c.CrashLoopBackOff.MaxContainerRestartPeriod
	switch {
	case on(gateCrashLoopBackOffMax) && max == nil:
		v.errs = append(v.errs, field.Required(field.NewPath("crashLoopBackOff", "maxContainerRestartPeriod"), "feature gate KubeletCrashLoopBackOffMax is enabled"))
	case on(gateCrashLoopBackOffMax) && (max.Duration < time.Second || max.Duration > 300*time.Second):
		v.invalid("crashLoopBackOff.maxContainerRestartPeriod", max.Duration.String(), "must be between 1s and 300s")
	case !on(gateCrashLoopBackOffMax) && max != nil:
		v.forbidden("crashLoopBackOff.maxContainerRestartPeriod", "must not be set unless feature gate KubeletCrashLoopBackOffMax is enabled")
	}
	if c.EnableSystemLogQuery != nil && *c.EnableSystemLogQuery {
		if !on(gateNodeLogQuery) {
			v.forbidden("enableSystemLogQuery", "requires feature gate NodeLogQuery")
		}
		if c.EnableSystemLogHandler != nil && !*c.EnableSystemLogHandler {
			v.forbidden("enableSystemLogQuery", "requires enableSystemLogHandler")
		}
	}
}

var sysctlName = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`)

func (v *validator) shutdown() {
	c, on := v.c, v.gates.Enabled
	grace, critical := c.ShutdownGracePeriod.Duration, c.ShutdownGracePeriodCriticalPods.Duration
	if on(gateGracefulNodeShutdown) {
		if critical > grace {
			v.invalid("shutdownGracePeriodCriticalPods", critical.String(), fmt.Sprintf("must be <= shutdownGracePeriod (%v)", grace))
		}
		for path, d := range map[string]time.Duration{"shutdownGracePeriod": grace, "shutdownGracePeriodCriticalPods": critical} {
			if d < 0 || (d > 0 && d < time.Second) {
				v.invalid(path, d.String(), "must be zero or at least 1s")
			}
		}
	} else if grace > 0 || critical > 0 {
		v.forbidden("shutdownGracePeriod", "requires feature gate GracefulNodeShutdown")
	}
	if len(c.ShutdownGracePeriodByPodPriority) > 0 {
		if !on(gateShutdownBasedOnPriority) {
			v.forbidden("shutdownGracePeriodByPodPriority", "requires feature gate GracefulNodeShutdownBasedOnPodPriority")
		} else if grace > 0 || critical > 0 {
			v.forbidden("shutdownGracePeriodByPodPriority", "cannot be set together with shutdownGracePeriod or shutdownGracePeriodCriticalPods")
		}
	}
}

// allocatable: enforceNodeAllocatable and the reserved cgroups.
func (v *validator) allocatable() {
	c := v.c
	seen := map[string]bool{}
	for i, val := range c.EnforceNodeAllocatable {
		path := fmt.Sprintf("enforceNodeAllocatable[%d]", i)
		if seen[val] {
			v.errs = append(v.errs, field.Duplicate(field.NewPath(path), val))
			continue
		}
		seen[val] = true
		switch val {
		case "pods":
		case "system-reserved", "system-reserved-compressible":
			if c.SystemReservedCgroup == "" {
				v.errs = append(v.errs, field.Required(field.NewPath("systemReservedCgroup"), fmt.Sprintf("needed when enforceNodeAllocatable has %q", val)))
			}
		case "kube-reserved", "kube-reserved-compressible":
			if c.KubeReservedCgroup == "" {
				v.errs = append(v.errs, field.Required(field.NewPath("kubeReservedCgroup"), fmt.Sprintf("needed when enforceNodeAllocatable has %q", val)))
			}
		case "none":
			if len(c.EnforceNodeAllocatable) > 1 {
				v.invalid(path, val, `"none" must be the only value`)
			}
			continue
		default:
			v.errs = append(v.errs, field.NotSupported(field.NewPath(path), val,
				[]string{"pods", "system-reserved", "system-reserved-compressible", "kube-reserved", "kube-reserved-compressible", "none"}))
			continue
		}
		if c.CgroupsPerQOS != nil && !*c.CgroupsPerQOS {
			v.forbidden(path, fmt.Sprintf("%q needs cgroupsPerQOS: true", val))
		}
	}
	for _, kind := range []string{"system-reserved", "kube-reserved"} {
		if seen[kind] && seen[kind+"-compressible"] {
			v.forbidden("enforceNodeAllocatable", fmt.Sprintf("%q and %q cannot be specified together", kind, kind+"-compressible"))
		}
	}
	if c.SystemCgroups != "" && c.CgroupRoot == "" {
		v.errs = append(v.errs, field.Required(field.NewPath("cgroupRoot"), "needed when systemCgroups is set"))
	}
	if c.ReservedSystemCPUs != "" {
		if c.SystemReservedCgroup != "" || c.KubeReservedCgroup != "" {
			v.forbidden("reservedSystemCPUs", "cannot be used with systemReservedCgroup or kubeReservedCgroup")
		}
		if _, err := cpuset.Parse(c.ReservedSystemCPUs); err != nil {
			v.invalid("reservedSystemCPUs", c.ReservedSystemCPUs, err.Error())
		}
	}
}

func (v *validator) oneOf(path, val string, allowed ...string) {
	for _, a := range allowed {
		if val == a {
			return
		}
	}
	v.errs = append(v.errs, field.NotSupported(field.NewPath(path), val, allowed))
}

func (v *validator) enums() {
	c := v.c
	v.oneOf("topologyManagerPolicy", c.TopologyManagerPolicy, "none", "best-effort", "restricted", "single-numa-node")
	v.oneOf("topologyManagerScope", c.TopologyManagerScope, "container", "pod")
	v.oneOf("hairpinMode", c.HairpinMode, "none", "hairpin-veth", "promiscuous-bridge")
	v.oneOf("cgroupDriver", c.CgroupDriver, "cgroupfs", "systemd")
	v.oneOf("memoryReservationPolicy", string(c.MemoryReservationPolicy), "None", "TieredReservation")
	if c.MemoryReservationPolicy == "TieredReservation" && !v.gates.Enabled(gateMemoryQoS) {
		v.forbidden("memoryReservationPolicy", "TieredReservation requires feature gate MemoryQoS")
	}
	if f := c.MemoryThrottlingFactor; f != nil {
		if !v.gates.Enabled(gateMemoryQoS) && *f != 0.9 {
			v.forbidden("memoryThrottlingFactor", "must not be set when feature gate MemoryQoS is disabled")
		}
		if *f <= 0 || *f > 1 {
			v.invalid("memoryThrottlingFactor", *f, "must be greater than 0 and at most 1")
		}
	}
	if c.Authorization.Mode != "" {
		v.oneOf("authorization.mode", string(c.Authorization.Mode), "AlwaysAllow", "Webhook")
	}
	if s := c.ShowHiddenMetricsForVersion; s != "" && s != "1.36" {
		v.invalid("showHiddenMetricsForVersion", s, "only the previous minor version, 1.36, is allowed")
	}
}

func (v *validator) images() {
	c := v.c
	if n := c.MaxParallelImagePulls; n != nil && *n < 1 {
		v.invalid("maxParallelImagePulls", *n, "must be a positive number")
	}
	if c.SerializeImagePulls != nil && *c.SerializeImagePulls && c.MaxParallelImagePulls != nil && *c.MaxParallelImagePulls > 1 {
		v.invalid("maxParallelImagePulls", *c.MaxParallelImagePulls, "cannot be larger than 1 unless serializeImagePulls is false")
	}
	policy, allow := c.ImagePullCredentialsVerificationPolicy, c.PreloadedImagesVerificationAllowlist
	if !v.gates.Enabled(gateEnsureSecretPulledImages) {
		if policy != "" {
			v.forbidden("imagePullCredentialsVerificationPolicy", "must not be set unless feature gate KubeletEnsureSecretPulledImages is enabled")
		}
		if len(allow) > 0 {
			v.forbidden("preloadedImagesVerificationAllowlist", "must not be set unless feature gate KubeletEnsureSecretPulledImages is enabled")
		}
		return
	}
	v.oneOf("imagePullCredentialsVerificationPolicy", string(policy), "NeverVerify", "NeverVerifyPreloadedImages", "NeverVerifyAllowlistedImages", "AlwaysVerify")
	if len(allow) > 0 && policy != kubeletv1beta1.NeverVerifyAllowlistedImages {
		v.forbidden("preloadedImagesVerificationAllowlist", `needs imagePullCredentialsVerificationPolicy "NeverVerifyAllowlistedImages"`)
	}
}

func (v *validator) logs() {
	c := v.c
	if i32(c.ContainerLogMaxWorkers) < 1 {
		v.invalid("containerLogMaxWorkers", i32(c.ContainerLogMaxWorkers), "must be at least 1")
	}
	if c.ContainerLogMonitorInterval != nil && c.ContainerLogMonitorInterval.Duration < 3*time.Second {
		v.invalid("containerLogMonitorInterval", c.ContainerLogMonitorInterval.Duration.String(), "must be at least 3s")
	}
	if i32(c.ContainerLogMaxFiles) <= 1 {
		v.invalid("containerLogMaxFiles", i32(c.ContainerLogMaxFiles), "must be greater than 1")
	}
	if q, err := resource.ParseQuantity(c.ContainerLogMaxSize); err != nil || q.Sign() <= 0 {
		v.invalid("containerLogMaxSize", c.ContainerLogMaxSize, "must be a positive quantity (e.g. 10Mi)")
	}
	dir := c.PodLogsDir
	switch {
	case dir == "":
		v.errs = append(v.errs, field.Required(field.NewPath("podLogsDir"), ""))
	case !filepath.IsAbs(dir):
		v.invalid("podLogsDir", dir, "must be an absolute path")
	case filepath.Clean(dir) != dir:
		v.invalid("podLogsDir", dir, "must be a normalized path")
	case strings.IndexFunc(dir, func(r rune) bool { return r > unicode.MaxASCII }) >= 0:
		v.invalid("podLogsDir", dir, "must contain ASCII characters only")
	}
	v.errs = append(v.errs, logsapi.Validate(&c.Logging, v.gates, field.NewPath("logging"))...)
	v.errs = append(v.errs, tracingapi.ValidateTracingConfiguration(c.Tracing, v.gates, field.NewPath("tracing"))...)
}

// resources: reservations, taints, DNS and the runtime endpoint.
func (v *validator) resources() {
	c := v.c
	for _, r := range []struct {
		path string
		m    map[string]string
	}{{"kubeReserved", c.KubeReserved}, {"systemReserved", c.SystemReserved}} {
		for k, val := range r.m {
			if q, err := resource.ParseQuantity(val); err != nil || q.Sign() < 0 {
				v.invalid(r.path+"["+k+"]", val, "must be a non-negative quantity")
			}
		}
	}
	for i, r := range c.ReservedMemory {
		for name, q := range r.Limits {
			if q.Sign() < 0 {
				v.invalid(fmt.Sprintf("reservedMemory[%d].limits[%s]", i, name), q.String(), "must not be negative")
			}
		}
	}
	for i, t := range c.RegisterWithTaints {
		path := fmt.Sprintf("registerWithTaints[%d]", i)
		if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			v.invalid(path+".key", t.Key, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(t.Value); t.Value != "" && len(errs) > 0 {
			v.invalid(path+".value", t.Value, strings.Join(errs, "; "))
		}
		v.oneOf(path+".effect", string(t.Effect), string(v1.TaintEffectNoSchedule), string(v1.TaintEffectPreferNoSchedule), string(v1.TaintEffectNoExecute))
		if t.TimeAdded != nil {
			v.forbidden(path+".timeAdded", "must not be set")
		}
	}
	for i, ip := range c.ClusterDNS {
		if net.ParseIP(ip) == nil {
			v.invalid(fmt.Sprintf("clusterDNS[%d]", i), ip, "must be an IP address")
		}
	}
	if c.ContainerRuntimeEndpoint == "" {
		v.errs = append(v.errs, field.Required(field.NewPath("containerRuntimeEndpoint"), ""))
	}
}

func (v *validator) misc() {
	c := v.c
	for name, val := range c.QOSReserved {
		var pct int64
		if _, err := fmt.Sscanf(val, "%d%%", &pct); err != nil || pct < 0 || pct > 100 || fmt.Sprintf("%d%%", pct) != val {
			v.invalid("qosReserved["+name+"]", val, "must be a percentage between 0% and 100%")
		}
	}
}

// userNsUnit is the length of a user-namespace ID range unit, as kubelet's.
const userNsUnit = 65536

// userNamespaces checks userNamespaces.idsPerPod as kubelet does on Linux:
// when set (an explicit 0 included; only absent means the default 65536)
// it must be a multiple of 65536 of at least 65536 and at most 2^32-1.
// Kubelet reports the first rule broken only, in these words.
func (v *validator) userNamespaces() {
	if v.c.UserNamespaces == nil || v.c.UserNamespaces.IDsPerPod == nil {
		return
	}
	const path = "userNamespaces.idsPerPod"
	switch n := *v.c.UserNamespaces.IDsPerPod; {
	case n < userNsUnit:
		v.invalid(path, n, fmt.Sprintf("must not be less than %d", userNsUnit))
	case n%userNsUnit != 0:
		v.invalid(path, n, fmt.Sprintf("must be a multiple of %d", userNsUnit))
	case n > math.MaxUint32:
		v.invalid(path, n, fmt.Sprintf("must not be more than %d", int64(math.MaxUint32)))
	}
}
