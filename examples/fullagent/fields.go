package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/kubeletconfig"
)

// fieldClass is what fullagent does with a KubeletConfiguration field.
type fieldClass int

const (
	// actedOn: the field's value changes what the agent does (Where says
	// which package).
	actedOn fieldClass = iota + 1
	// refusedUnlessDefault: nodekit does not implement the field; a value
	// other than kubelet v1.37's default stops the agent at start-up,
	// naming the field. Where says what the default means here.
	refusedUnlessDefault
	// noEffect: accepted with any value, by design; Where says why.
	noEffect
)

func (c fieldClass) String() string {
	switch c {
	case actedOn:
		return "acted on"
	case refusedUnlessDefault:
		return "refused unless default"
	case noEffect:
		return "accepted, no effect by design"
	}
	return "unclassified"
}

// configField is one row of the accounting: a field by its JSON path.
type configField struct {
	Path  string
	Class fieldClass
	Where string
	// Also is, for some refused fields, a second accepted value in JSON:
	// the one that describes what nodekit does when the default is a gap
	// (failSwapOn: false, healthzPort: 0).
	Also string
}

// configFields accounts for every field of KubeletConfiguration (leaves;
// structs of the kubelet API are walked). fields_test.go walks the type by
// reflection and fails on a field missing here; README.md's table is
// generated from this one (go generate ./examples/fullagent).
func configFields() []configField {
	return append(serverFields(), resourceFields()...)
}

func acted(path, where string) configField {
	return configField{Path: path, Class: actedOn, Where: where}
}

func refused(path, where string) configField {
	return configField{Path: path, Class: refusedUnlessDefault, Where: where}
}

// refusedBut is refused unless the default or also (JSON).
func refusedBut(path, also, where string) configField {
	return configField{Path: path, Class: refusedUnlessDefault, Where: where, Also: also}
}

func noEffectField(path, why string) configField {
	return configField{Path: path, Class: noEffect, Where: why}
}

// serverFields: from enableServer to imageGCLowThresholdPercent, in the
// order of the Go type (pod sources, the node API, images, status).
func serverFields() []configField {
	return []configField{
		acted("enableServer", "server (false: no secure port; the read-only port and healthz still run, as upstream)"),
		acted("staticPodPath", "podconfig (file source)"),
		acted("podLogsDir", "criruntime, gc, stats"),
		acted("syncFrequency", "syncloop, volumemgr"),
		acted("fileCheckFrequency", "podconfig"),
		acted("httpCheckFrequency", "podconfig"),
		acted("staticPodURL", "podconfig (HTTP source)"),
		acted("staticPodURLHeader", "podconfig"),
		acted("address", "server"),
		acted("port", "server, statusmgr (daemonEndpoints)"),
		acted("readOnlyPort", "server"),
		acted("tlsCertFile", "server"),
		acted("tlsPrivateKeyFile", "server"),
		acted("tlsCipherSuites", "server (upstream's names; unknown names refused)"),
		acted("tlsCurvePreferences", "server"),
		acted("tlsMinVersion", "server"),
		acted("rotateCertificates", "bootstrap (client certificate rotation)"),
		acted("serverTLSBootstrap", "server (CSR-issued serving certificate)"),
		acted("authentication.x509.clientCAFile", "server"),
		acted("authentication.webhook.enabled", "server (TokenReview; refused standalone, as kubelet)"),
		acted("authentication.webhook.cacheTTL", "server"),
		acted("authentication.anonymous.enabled", "server"),
		acted("authorization.mode", "server (SubjectAccessReview or AlwaysAllow; Webhook refused standalone, as kubelet)"),
		acted("authorization.webhook.cacheAuthorizedTTL", "server"),
		acted("authorization.webhook.cacheUnauthorizedTTL", "server"),
		acted("registryPullQPS", "criruntime"),
		acted("registryBurst", "criruntime"),
		acted("imagePullCredentialsVerificationPolicy", "pullrecords, criruntime (KubeletEnsureSecretPulledImages: kubelet's pull records under ROOT/image_manager)"),
		acted("preloadedImagesVerificationAllowlist", "pullrecords (NeverVerifyAllowlistedImages)"),
		acted("eventRecordQPS", "fullagent (the event client's QPS)"),
		acted("eventBurst", "fullagent (the event client's burst)"),
		acted("enableDebuggingHandlers", "server (false: exec, attach, port-forward, run, containerLogs, runningpods, logs, debug/pprof answer 405; debug/flags/v 404)"),
		acted("enableContentionProfiling", "fullagent (block profiling for /debug/pprof/block, with the profiling handler)"),
		acted("healthzPort", "fullagent, server (plain-HTTP /healthz; 0 disables)"),
		acted("healthzBindAddress", "fullagent, server"),
		refused("oomScoreAdj", "gap: the agent keeps the OOM score it was started with (kubelet sets -999)"),
		acted("clusterDomain", "podopts (DNS)"),
		acted("clusterDNS", "podopts (DNS)"),
		acted("streamingConnectionIdleTimeout", "server (idle exec/attach/port-forward streams are closed; deprecated and without effect upstream)"),
		acted("nodeStatusUpdateFrequency", "statusmgr"),
		acted("nodeStatusReportFrequency", "statusmgr"),
		acted("nodeLeaseDurationSeconds", "statusmgr (Lease)"),
		acted("imageMinimumGCAge", "gc"),
		acted("imageMaximumGCAge", "gc"),
		acted("imageGCHighThresholdPercent", "gc"),
		acted("imageGCLowThresholdPercent", "gc"),
	}
}

// resourceFields: from volumeStatsAggPeriod to the end (cgroups, resource
// managers, eviction, logs, logging, shutdown, registration).
func resourceFields() []configField {
	return append(cgroupFields(), evictionFields()...)
}

// cgroupFields: from volumeStatsAggPeriod to maxParallelImagePulls
// (cgroups, resource managers, runtime, API client).
func cgroupFields() []configField {
	return []configField{
		acted("volumeStatsAggPeriod", "stats: how often every pod volume is measured (emptyDir, configMap, secret, downwardAPI, projected by a walk; CSI by NodeGetVolumeStats) for the Summary API, eviction and kubelet_volume_stats_*; 0 measures none and reports no volumes, as upstream"),
		refused("kubeletCgroups", "the agent stays in the cgroup it was started in"),
		refused("systemCgroups", "no system cgroup is made"),
		acted("cgroupRoot", "cgroupmgr"),
		acted("cgroupsPerQOS", "cgroupmgr"),
		acted("cgroupDriver", "cgroupmgr; the runtime's when CRI RuntimeConfig reports one (containerd 2), as upstream"),
		acted("cpuManagerPolicy", "cpumanager"),
		refused("singleProcessOOMKill", "the runtime's default (memory.oom.group is not set)"),
		acted("cpuManagerPolicyOptions", "cpumanager"),
		acted("cpuManagerReconcilePeriod", "cpumanager"),
		acted("memoryManagerPolicy", "memorymanager"),
		acted("topologyManagerPolicy", "topology"),
		acted("topologyManagerScope", "topology"),
		acted("topologyManagerPolicyOptions", "topology"),
		acted("qosReserved", "cgroupmgr, with the QOSReserved gate (alpha): memory limits of the burstable and besteffort QoS cgroups; refused without the gate (kubelet ignores it then), without cgroupsPerQOS, or for a resource other than memory"),
		acted("runtimeRequestTimeout", "criruntime"),
		noEffectField("hairpinMode", "with a CRI runtime hairpin traffic is the CNI plugin's configuration; kubelet v1.37 does not pass the field on either"),
		acted("maxPods", "statusmgr (capacity), admission, pullrecords (cache sizes)"),
		refused("podCIDR", "the CNI configuration assigns pod addresses"),
		acted("podPidsLimit", "cgroupmgr"),
		acted("resolvConf", "podopts (DNS)"),
		refused("runOnce", "validation refuses it, as upstream"),
		acted("cpuCFSQuota", "cgroupmgr, criruntime"),
		acted("cpuCFSQuotaPeriod", "cgroupmgr"),
		refusedBut("nodeStatusMaxImages", "0", "gap: statusmgr reports no images (0 says so; kubelet reports 50)"),
		acted("maxOpenFiles", "fullagent (RLIMIT_NOFILE at start-up)"),
		acted("contentType", "fullagent (the API client's content type)"),
		acted("kubeAPIQPS", "fullagent (the API client)"),
		acted("kubeAPIBurst", "fullagent (the API client)"),
		acted("serializeImagePulls", "criruntime"),
		acted("maxParallelImagePulls", "criruntime, pullrecords (cache sizes)"),
	}
}

// evictionFields: from evictionHard to the end (eviction, logs, logging,
// reservations, shutdown, registration).
func evictionFields() []configField {
	return []configField{
		acted("evictionHard", "eviction, memorymanager"),
		acted("evictionSoft", "eviction"),
		acted("evictionSoftGracePeriod", "eviction"),
		acted("evictionPressureTransitionPeriod", "eviction"),
		acted("evictionMaxPodGracePeriod", "eviction"),
		acted("evictionMinimumReclaim", "eviction"),
		acted("mergeDefaultEvictionSettings", "kubeletconfig (defaults)"),
		refused("podsPerCore", "no per-core limit"),
		refused("enableControllerAttachDetach", "statusmgr, volumemgr, volumemgr/csi (true: the Node's volumes.kubernetes.io/controller-managed-attach-detach annotation, status.volumesInUse, and attachRequired CSI volumes wait for the controller's VolumeAttachment; false, the node attaching volumes itself, is refused)"),
		acted("protectKernelDefaults", "cgroupmgr (kernel tunables: true checks them at start-up, false sets those that differ, as kubelet)"),
		noEffectField("makeIPTablesUtilChains", "nodekit never touches the host's iptables; the KUBE-IPTABLES-HINT chain is a hint for kube-proxy"),
		noEffectField("iptablesMasqueradeBit", "deprecated upstream: no effect there either"),
		noEffectField("iptablesDropBit", "deprecated upstream: no effect there either"),
		acted("featureGates", "kubeletconfig (v1.37 gates); a gate away from its default is refused unless nodekit implements it (gates.go)"),
		refusedBut("failSwapOn", "false", "gap: swap is not checked at start-up (false says so; kubelet refuses to start with swap on)"),
		refused("memorySwap.swapBehavior", "no swap for containers (NoSwap)"),
		acted("containerLogMaxSize", "logs"),
		acted("containerLogMaxFiles", "logs"),
		acted("containerLogMaxWorkers", "logs"),
		acted("containerLogMonitorInterval", "logs"),
		refused("configMapAndSecretChangeDetectionStrategy", "Watch: volumemgr watches the objects volumes use"),
		acted("systemReserved", "cgroupmgr, statusmgr (allocatable)"),
		acted("kubeReserved", "cgroupmgr, statusmgr (allocatable)"),
		acted("reservedSystemCPUs", "cpumanager"),
		refused("showHiddenMetricsForVersion", "hidden metrics stay hidden"),
		acted("systemReservedCgroup", "cgroupmgr"),
		acted("kubeReservedCgroup", "cgroupmgr"),
		acted("enforceNodeAllocatable", "cgroupmgr"),
		acted("allowedUnsafeSysctls", "admission"),
		refused("defaultPodSysctls", "no default sysctls"),
		refused("volumePluginDir", "no FlexVolume plugins"),
		refused("providerID", "no spec.providerID on the Node"),
		refused("kernelMemcgNotification", "eviction polls"),
		acted("logging.format", "fullagent (component-base logs, as kubelet: text, or json in upstream's schema; klog's lines from every library too; --log-json is --logging-format=json)"),
		acted("logging.flushFrequency", "fullagent (component-base logs: klog flush)"),
		acted("logging.verbosity", "fullagent (component-base logs: -v)"),
		acted("logging.vmodule", "fullagent (component-base logs: -vmodule, text format only)"),
		acted("logging.options", "fullagent (component-base logs: text and json split streams, info buffer sizes; LoggingAlphaOptions)"),
		acted("enableSystemLogHandler", "server (/logs/ serves /var/log)"),
		refused("enableSystemLogQuery", "no node log query"),
		acted("shutdownGracePeriod", "shutdown"),
		acted("shutdownGracePeriodCriticalPods", "shutdown"),
		acted("shutdownGracePeriodByPodPriority", "shutdown"),
		refused("crashLoopBackOff.maxContainerRestartPeriod", "syncloop's back-off caps at 300s, the default"),
		acted("reservedMemory", "memorymanager"),
		acted("enableProfilingHandler", "server (/debug/pprof/, with the debugging handlers; false: 405)"),
		acted("enableDebugFlagsHandler", "server, fullagent (PUT /debug/flags/v sets klog's -v and the logging format's, as upstream's logs.GlogSetter, with the debugging handlers; false: 405)"),
		acted("seccompDefault", "criruntime (RuntimeDefault for containers without a profile)"),
		refused("memoryThrottlingFactor", "no MemoryQoS"),
		refused("memoryReservationPolicy", "None"),
		acted("registerWithTaints", "statusmgr (node registration)"),
		acted("registerNode", "statusmgr"),
		acted("tracing", "fullagent (component-base tracing: OTLP gRPC exporter; spans of CRI calls, pod worker steps, GC passes, API requests and node API requests)"),
		acted("localStorageCapacityIsolation", "eviction"),
		acted("containerRuntimeEndpoint", "criruntime"),
		acted("imageServiceEndpoint", "criruntime"),
		noEffectField("failCgroupV1", "cgroupmgr supports cgroup v1 and v2, so nodekit never refuses a v1 host; true (the default) and false both run"),
		acted("userNamespaces.idsPerPod", "criruntime/userns (hostUsers: false ID ranges)"),
	}
}

// walkedStructs are the struct types whose fields are accounted one by
// one rather than as a whole.
func walkedStruct(t reflect.Type) bool {
	switch t.PkgPath() {
	case "k8s.io/kubelet/config/v1beta1":
		return true
	case "k8s.io/component-base/logs/api/v1":
		return t.Name() == "LoggingConfiguration"
	}
	return false
}

// fieldValue follows a JSON path through cfg; ok is false when a pointer
// on the way is nil (the value is then its zero).
func fieldValue(v reflect.Value, path string) (reflect.Value, bool) {
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		f, ok := fieldByJSON(v.Type(), name)
		if !ok {
			return reflect.Value{}, false
		}
		v = v.FieldByIndex(f.Index)
	}
	return v, true
}

func fieldByJSON(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if strings.Split(f.Tag.Get("json"), ",")[0] == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// checkRefusedFields is the start-up check: every field nodekit does not
// implement must hold kubelet v1.37's default. The error names each field
// set otherwise, with the value and the default.
func checkRefusedFields(cfg *kubeletv1beta1.KubeletConfiguration) error {
	def := &kubeletv1beta1.KubeletConfiguration{}
	def.FeatureGates = cfg.FeatureGates // gate-dependent defaults follow the gates in use
	if err := kubeletconfig.SetDefaults(def); err != nil {
		return err
	}
	var bad []string
	for _, f := range configFields() {
		if f.Class != refusedUnlessDefault {
			continue
		}
		got, gotOK := fieldValue(reflect.ValueOf(cfg), f.Path)
		want, wantOK := fieldValue(reflect.ValueOf(def), f.Path)
		if sameValue(got, gotOK, want, wantOK) || (f.Also != "" && serialized(got, gotOK) == f.Also) {
			continue
		}
		also := ""
		if f.Also != "" {
			also = " or " + f.Also
		}
		bad = append(bad, fmt.Sprintf("%s: %s is not supported by nodekit (only the default %s%s; %s)", f.Path, show(got, gotOK), show(want, wantOK), also, f.Where))
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("configuration: %s", strings.Join(bad, "; "))
	}
	return nil
}

// sameValue compares as serialized, so a quantity written "0" equals the
// zero quantity and an empty list equals an absent one.
func sameValue(a reflect.Value, aOK bool, b reflect.Value, bOK bool) bool {
	return serialized(a, aOK) == serialized(b, bOK)
}

// serialized is v as JSON, "null" for unset, zero or empty values; a
// pointer is its target ("false" for a pointer to false).
func serialized(v reflect.Value, ok bool) string {
	for ok && v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if !ok || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return "null"
	}
	js, err := json.Marshal(v.Interface())
	if err != nil {
		return fmt.Sprintf("%#v", v.Interface())
	}
	if s := string(js); s != "[]" && s != "{}" && s != `""` {
		return s
	}
	return "null"
}

func show(v reflect.Value, ok bool) string {
	if !ok {
		return "unset"
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "unset"
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.String {
		return fmt.Sprintf("%q", v.String())
	}
	return fmt.Sprintf("%v", v.Interface())
}
