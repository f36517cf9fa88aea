package main

import (
	"sort"
	"strings"
)

// mixinSeries are the kubelet-job metric families the kubernetes-mixin
// (kubernetes-monitoring/kubernetes-mixin at aa38e2b: dashboards/kubelet,
// alerts/kubelet, rules/kubelet) reads, which a node running pods serves
// from its first minutes. Families the mixin reads that appear only with
// an event, as upstream's (a CounterVec has no series before its first
// increment), are left out here and covered where the event happens:
// kubelet_runtime_operations_errors_total (a failed CRI call),
// kubelet_evictions (an eviction), the kubelet_certificate_manager_* and
// kubelet_server_expiration_renew_errors series (certificate rotation on),
// kubelet_volume_stats_* and storage_operation_duration_seconds (a CSI
// volume; TestCSIVolumeStats). The mixin's dashboard also reads
// kubelet_node_config_error and storage_operation_errors_total, which
// kubelet v1.37 no longer has (failures are storage_operation_duration's
// status label).
var mixinSeries = []string{
	"go_goroutines",
	"kubelet_cgroup_manager_duration_seconds_bucket",
	"kubelet_cgroup_manager_duration_seconds_count",
	"kubelet_node_name",
	"kubelet_pleg_relist_duration_seconds_bucket",
	"kubelet_pleg_relist_duration_seconds_count",
	"kubelet_pleg_relist_interval_seconds_bucket",
	"kubelet_pod_start_duration_seconds_bucket",
	"kubelet_pod_start_duration_seconds_count",
	"kubelet_pod_worker_duration_seconds_bucket",
	"kubelet_pod_worker_duration_seconds_count",
	"kubelet_running_containers",
	"kubelet_running_pods",
	"kubelet_runtime_operations_duration_seconds_bucket",
	"kubelet_runtime_operations_total",
	"process_cpu_seconds_total",
	"process_resident_memory_bytes",
	"rest_client_request_duration_seconds_bucket",
	"rest_client_requests_total",
	"volume_manager_total_volumes",
}

// missingFamilies returns the families of want with no series in scraped
// (series keys "name" or "name{labels}"), sorted.
func missingFamilies(scraped map[string]float64, want []string) []string {
	have := map[string]bool{}
	for series := range scraped {
		name, _, _ := strings.Cut(series, "{")
		have[name] = true
	}
	var missing []string
	for _, f := range want {
		if !have[f] {
			missing = append(missing, f)
		}
	}
	sort.Strings(missing)
	return missing
}
