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
	a := func(path, where string) configField { return configField{Path: path, Class: actedOn, Where: where} }
	r := func(path, where string) configField {
		return configField{Path: path, Class: refusedUnlessDefault, Where: where}
	}
	// ra is refused unless the default or also (JSON).
	ra := func(path, also, where string) configField {
		return configField{Path: path, Class: refusedUnlessDefault, Where: where, Also: also}
	}
	n := func(path, why string) configField { return configField{Path: path, Class: noEffect, Where: why} }
	return []configField{
		r("enableServer", "the node API always runs"),
		a("staticPodPath", "podconfig (file source)"),
		a("podLogsDir", "criruntime, gc, stats"),
		a("syncFrequency", "syncloop, volumemgr"),
		a("fileCheckFrequency", "podconfig"),
		a("httpCheckFrequency", "podconfig"),
		a("staticPodURL", "podconfig (HTTP source)"),
		a("staticPodURLHeader", "podconfig"),
		a("address", "server"),
		a("port", "server, statusmgr (daemonEndpoints)"),
		a("readOnlyPort", "server"),
		a("tlsCertFile", "server"),
		a("tlsPrivateKeyFile", "server"),
		r("tlsCipherSuites", "Go's default cipher suites"),
		r("tlsCurvePreferences", "Go's default curves"),
		r("tlsMinVersion", "Go's default minimum (TLS 1.2)"),
		a("rotateCertificates", "bootstrap (client certificate rotation)"),
		a("serverTLSBootstrap", "server (CSR-issued serving certificate)"),
		a("authentication.x509.clientCAFile", "server"),
		a("authentication.webhook.enabled", "server (TokenReview)"),
		a("authentication.webhook.cacheTTL", "server"),
		a("authentication.anonymous.enabled", "server"),
		a("authorization.mode", "server (SubjectAccessReview or AlwaysAllow)"),
		a("authorization.webhook.cacheAuthorizedTTL", "server"),
		a("authorization.webhook.cacheUnauthorizedTTL", "server"),
		a("registryPullQPS", "criruntime"),
		a("registryBurst", "criruntime"),
		ra("imagePullCredentialsVerificationPolicy", `"NeverVerify"`, "gap: the default's re-verification of pull credentials for images pulled with a Secret is not implemented; NeverVerify is what nodekit does"),
		r("preloadedImagesVerificationAllowlist", "no allowlist"),
		a("eventRecordQPS", "fullagent (the event client's QPS)"),
		a("eventBurst", "fullagent (the event client's burst)"),
		r("enableDebuggingHandlers", "exec, attach, port-forward, logs and run are served"),
		r("enableContentionProfiling", "off"),
		ra("healthzPort", "0", "gap: no separate healthz listener (0 says so); /healthz is served on the node API port"),
		r("healthzBindAddress", "see healthzPort"),
		r("oomScoreAdj", "gap: the agent keeps the OOM score it was started with (kubelet sets -999)"),
		a("clusterDomain", "podopts (DNS)"),
		a("clusterDNS", "podopts (DNS)"),
		r("streamingConnectionIdleTimeout", "deprecated upstream, no effect there either"),
		a("nodeStatusUpdateFrequency", "statusmgr"),
		a("nodeStatusReportFrequency", "statusmgr"),
		a("nodeLeaseDurationSeconds", "statusmgr (Lease)"),
		a("imageMinimumGCAge", "gc"),
		a("imageMaximumGCAge", "gc"),
		a("imageGCHighThresholdPercent", "gc"),
		a("imageGCLowThresholdPercent", "gc"),
		r("volumeStatsAggPeriod", "volume usage is measured when stats are asked for"),
		r("kubeletCgroups", "the agent stays in the cgroup it was started in"),
		r("systemCgroups", "no system cgroup is made"),
		a("cgroupRoot", "cgroupmgr"),
		a("cgroupsPerQOS", "cgroupmgr"),
		a("cgroupDriver", "cgroupmgr"),
		a("cpuManagerPolicy", "cpumanager"),
		r("singleProcessOOMKill", "the runtime's default (memory.oom.group is not set)"),
		a("cpuManagerPolicyOptions", "cpumanager"),
		a("cpuManagerReconcilePeriod", "cpumanager"),
		a("memoryManagerPolicy", "memorymanager"),
		a("topologyManagerPolicy", "topology"),
		a("topologyManagerScope", "topology"),
		a("topologyManagerPolicyOptions", "topology"),
		a("qosReserved", "cgroupmgr"),
		a("runtimeRequestTimeout", "criruntime"),
		n("hairpinMode", "with a CRI runtime hairpin traffic is the CNI plugin's configuration; kubelet v1.37 does not pass the field on either"),
		a("maxPods", "statusmgr (capacity), admission"),
		r("podCIDR", "the CNI configuration assigns pod addresses"),
		a("podPidsLimit", "cgroupmgr"),
		a("resolvConf", "podopts (DNS)"),
		r("runOnce", "validation refuses it, as upstream"),
		a("cpuCFSQuota", "cgroupmgr"),
		a("cpuCFSQuotaPeriod", "cgroupmgr"),
		ra("nodeStatusMaxImages", "0", "gap: statusmgr reports no images (0 says so; kubelet reports 50)"),
		a("maxOpenFiles", "fullagent (RLIMIT_NOFILE at start-up)"),
		a("contentType", "fullagent (the API client's content type)"),
		a("kubeAPIQPS", "fullagent (the API client)"),
		a("kubeAPIBurst", "fullagent (the API client)"),
		a("serializeImagePulls", "criruntime"),
		a("maxParallelImagePulls", "criruntime"),
		a("evictionHard", "eviction, memorymanager"),
		a("evictionSoft", "eviction"),
		a("evictionSoftGracePeriod", "eviction"),
		a("evictionPressureTransitionPeriod", "eviction"),
		a("evictionMaxPodGracePeriod", "eviction"),
		a("evictionMinimumReclaim", "eviction"),
		a("mergeDefaultEvictionSettings", "kubeletconfig (defaults)"),
		r("podsPerCore", "no per-core limit"),
		r("enableControllerAttachDetach", "attach/detach is the controller's; nodekit attaches nothing"),
		r("protectKernelDefaults", "kernel tunables are not checked"),
		n("makeIPTablesUtilChains", "nodekit never touches the host's iptables; the KUBE-IPTABLES-HINT chain is a hint for kube-proxy"),
		n("iptablesMasqueradeBit", "deprecated upstream: no effect there either"),
		n("iptablesDropBit", "deprecated upstream: no effect there either"),
		a("featureGates", "kubeletconfig (v1.37 gates); a gate away from its default is refused unless nodekit implements it (gates.go)"),
		ra("failSwapOn", "false", "gap: swap is not checked at start-up (false says so; kubelet refuses to start with swap on)"),
		r("memorySwap.swapBehavior", "no swap for containers (NoSwap)"),
		a("containerLogMaxSize", "logs"),
		a("containerLogMaxFiles", "logs"),
		a("containerLogMaxWorkers", "logs"),
		a("containerLogMonitorInterval", "logs"),
		r("configMapAndSecretChangeDetectionStrategy", "Watch: volumemgr watches the objects volumes use"),
		a("systemReserved", "cgroupmgr, statusmgr (allocatable)"),
		a("kubeReserved", "cgroupmgr, statusmgr (allocatable)"),
		a("reservedSystemCPUs", "cpumanager"),
		r("showHiddenMetricsForVersion", "hidden metrics stay hidden"),
		a("systemReservedCgroup", "cgroupmgr"),
		a("kubeReservedCgroup", "cgroupmgr"),
		a("enforceNodeAllocatable", "cgroupmgr"),
		a("allowedUnsafeSysctls", "admission"),
		r("defaultPodSysctls", "no default sysctls"),
		r("volumePluginDir", "no FlexVolume plugins"),
		r("providerID", "no spec.providerID on the Node"),
		r("kernelMemcgNotification", "eviction polls"),
		a("logging.format", "fullagent: text (klog); --log-json for JSON lines"),
		a("logging.flushFrequency", "fullagent (klog flush)"),
		a("logging.verbosity", "fullagent (klog -v)"),
		a("logging.vmodule", "fullagent (klog -vmodule)"),
		r("logging.options", "no split streams or buffering"),
		ra("enableSystemLogHandler", "false", "gap: no /logs/ handler is served (false says so)"),
		r("enableSystemLogQuery", "no node log query"),
		a("shutdownGracePeriod", "shutdown"),
		a("shutdownGracePeriodCriticalPods", "shutdown"),
		a("shutdownGracePeriodByPodPriority", "shutdown"),
		r("crashLoopBackOff.maxContainerRestartPeriod", "syncloop's back-off caps at 300s, the default"),
		a("reservedMemory", "memorymanager"),
		ra("enableProfilingHandler", "false", "gap: no /debug/pprof handler is served (false says so)"),
		ra("enableDebugFlagsHandler", "false", "gap: no /debug/flags/v handler is served (false says so)"),
		r("seccompDefault", "Unconfined unless the pod asks for a profile"),
		r("memoryThrottlingFactor", "no MemoryQoS"),
		r("memoryReservationPolicy", "None"),
		a("registerWithTaints", "statusmgr (node registration)"),
		a("registerNode", "statusmgr"),
		r("tracing", "no tracing"),
		a("localStorageCapacityIsolation", "eviction"),
		a("containerRuntimeEndpoint", "criruntime"),
		a("imageServiceEndpoint", "criruntime"),
		n("failCgroupV1", "cgroupmgr supports cgroup v1 and v2, so nodekit never refuses a v1 host; true (the default) and false both run"),
		r("userNamespaces.idsPerPod", "kubelet's default mapping size"),
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
