package containermetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	versionDesc = prometheus.NewDesc("cadvisor_version_info",
		"A metric with a constant '1' value labeled by kernel version, OS version, docker version, cadvisor version & cadvisor revision.",
		[]string{"cadvisorRevision", "cadvisorVersion", "dockerVersion", "kernelVersion", "osVersion"}, nil)
	scrapeErrorDesc = prometheus.NewDesc("container_scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// maxMemory: a limit above it is "no limit", served as 0 (as cadvisor).
const maxMemory = uint64(1 << 62)

func specMemory(v uint64) float64 {
	if v > maxMemory {
		return 0
	}
	return float64(v)
}

// sample is one value of a series, with its extra label values.
type sample struct {
	v      float64
	labels []string
}

// series describes one container_* family: cadvisor's name, help, type
// and extra labels, and how a cgroup's numbers give its samples.
type series struct {
	name, help string
	counter    bool
	extra      []string
	// when, if set, must hold for the family to be served for a cgroup.
	when   func(*cgroupStats, identity) bool
	values func(*cgroupStats) []sample
}

func one(v float64) []sample { return []sample{{v: v}} }

func ns(v uint64) float64 { return float64(v) / float64(time.Second) }

func hasQuota(s *cgroupStats, _ identity) bool  { return s.cpuQuota != 0 }
func hasMemory(s *cgroupStats, _ identity) bool { return s.hasMemory }
func hasCPU(s *cgroupStats, _ identity) bool    { return s.hasCPU }

// cpuSeries are cadvisor's CpuUsageMetrics.
var cpuSeries = []series{
	{name: "container_cpu_user_seconds_total", help: "Cumulative user cpu time consumed in seconds.", counter: true, when: hasCPU,
		values: func(s *cgroupStats) []sample { return one(ns(s.cpuUser)) }},
	{name: "container_cpu_system_seconds_total", help: "Cumulative system cpu time consumed in seconds.", counter: true, when: hasCPU,
		values: func(s *cgroupStats) []sample { return one(ns(s.cpuSys)) }},
	{name: "container_cpu_usage_seconds_total", help: "Cumulative cpu time consumed in seconds.", counter: true, extra: []string{"cpu"}, when: hasCPU,
		values: func(s *cgroupStats) []sample {
			if s.cpuTotal == 0 {
				return nil
			}
			return []sample{{v: ns(s.cpuTotal), labels: []string{"total"}}}
		}},
	{name: "container_cpu_cfs_periods_total", help: "Number of elapsed enforcement period intervals.", counter: true, when: hasQuota,
		values: func(s *cgroupStats) []sample { return one(float64(s.periods)) }},
	{name: "container_cpu_cfs_throttled_periods_total", help: "Number of throttled period intervals.", counter: true, when: hasQuota,
		values: func(s *cgroupStats) []sample { return one(float64(s.throttled)) }},
	{name: "container_cpu_cfs_throttled_seconds_total", help: "Total time duration the container has been throttled.", counter: true, when: hasQuota,
		values: func(s *cgroupStats) []sample { return one(ns(s.throttledNS)) }},
}

// memorySeries are cadvisor's MemoryUsageMetrics that cgroup v1 and v2
// both give.
var memorySeries = []series{
	{name: "container_memory_cache", help: "Number of bytes of page cache memory.", when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memCache)) }},
	{name: "container_memory_rss", help: "Size of RSS in bytes.", when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memRSS)) }},
	{name: "container_memory_kernel_usage", help: "Size of kernel memory allocated in bytes.", when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memKernel)) }},
	{name: "container_memory_mapped_file", help: "Size of memory mapped files in bytes.", when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memMapped)) }},
	{name: "container_memory_swap", help: "Container swap usage in bytes.", when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memSwap)) }},
	{name: "container_memory_failcnt", help: "Number of memory usage hits limits", counter: true, when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memFailcnt)) }},
	{name: "container_memory_usage_bytes", help: "Current memory usage in bytes, including all memory regardless of when it was accessed", when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memUsage)) }},
	{name: "container_memory_max_usage_bytes", help: "Maximum memory usage recorded in bytes", when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memMaxUsage)) }},
	{name: "container_memory_working_set_bytes", help: "Current working set in bytes.", when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memWorkingSet)) }},
	{name: "container_memory_total_active_file_bytes", help: "Current total active file in bytes.", when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memActiveFile)) }},
	{name: "container_memory_total_inactive_file_bytes", help: "Current total inactive file in bytes.", when: hasMemory,
		values: func(s *cgroupStats) []sample { return one(float64(s.memInactiveFile)) }},
	{name: "container_memory_failures_total", help: "Cumulative count of memory allocation failures.", counter: true,
		extra: []string{"failure_type", "scope"}, when: hasMemory,
		values: func(s *cgroupStats) []sample {
			return []sample{
				{v: float64(s.pgfault), labels: []string{"pgfault", "container"}},
				{v: float64(s.pgmajfault), labels: []string{"pgmajfault", "container"}},
				{v: float64(s.pgfault), labels: []string{"pgfault", "hierarchy"}},
				{v: float64(s.pgmajfault), labels: []string{"pgmajfault", "hierarchy"}},
			}
		}},
}

// memoryV2Series are the MemoryUsageMetrics whose numbers only cgroup v2
// has; cadvisor serves them (as 0) under v1 too.
var memoryV2Series = func() []series {
	var out []series
	for _, f := range []struct {
		name, key, help string
		counter         bool
	}{
		{"container_memory_events_high_total", "events_high", "Cumulative count of memory.high throttle events for the container", true},
		{"container_memory_events_max_total", "events_max", "Cumulative count of memory.max limit hit events for the container", true},
		{"container_memory_file_dirty_bytes", "file_dirty", "Number of bytes of file cache that has been modified but not yet written back to disk.", false},
		{"container_memory_file_writeback_bytes", "file_writeback", "Number of bytes of file cache that is currently being written back to disk.", false},
		{"container_memory_pgscan_total", "pgscan", "Cumulative number of pages scanned by the page reclaim algorithm.", true},
		{"container_memory_pgsteal_total", "pgsteal", "Cumulative number of pages reclaimed by the page reclaim algorithm.", true},
		{"container_memory_workingset_refault_file_total", "workingset_refault_file", "Cumulative number of refaults of previously evicted file pages.", true},
		{"container_memory_workingset_refault_anon_total", "workingset_refault_anon", "Cumulative number of refaults of previously evicted anonymous pages.", true},
	} {
		out = append(out, series{name: f.name, help: f.help, counter: f.counter, when: hasMemory,
			values: func(s *cgroupStats) []sample { return one(float64(s.memV2[f.key])) }})
	}
	return out
}()

// oomSeries is cadvisor's OOMMetrics: kubelet counts the kernel's OOM
// kills by container from its OOM watcher; here the cgroup's own count.
var oomSeries = []series{
	{name: "container_oom_events_total", help: "Count of out of memory events observed for the container", counter: true,
		values: func(s *cgroupStats) []sample { return one(float64(s.oomKills)) }},
}

// processSeries are cadvisor's ProcessMetrics but container_ulimits_soft
// (ulimitSeries).
var processSeries = []series{
	{name: "container_processes", help: "Number of processes running inside the container.",
		values: func(s *cgroupStats) []sample { return one(float64(len(s.procs))) }},
	{name: "container_file_descriptors", help: "Number of open file descriptors for the container.",
		values: func(s *cgroupStats) []sample { return one(float64(s.fds)) }},
	{name: "container_sockets", help: "Number of open sockets for the container.",
		values: func(s *cgroupStats) []sample { return one(float64(s.sockets)) }},
	{name: "container_threads_max", help: "Maximum number of threads allowed inside the container, infinity if value is zero",
		when: func(s *cgroupStats, _ identity) bool { return s.hasPids },
		values: func(s *cgroupStats) []sample {
			if s.pidsLimit == ^uint64(0) {
				return one(0)
			}
			return one(float64(s.pidsLimit))
		}},
	{name: "container_threads", help: "Number of threads running inside the container",
		when:   func(s *cgroupStats, _ identity) bool { return s.hasPids },
		values: func(s *cgroupStats) []sample { return one(float64(s.thread)) }},
}

// networkSeries are cadvisor's NetworkUsageMetrics: served for the root
// cgroup and pod sandboxes (the containers share the sandbox's network).
var networkSeries = func() []series {
	var out []series
	for _, f := range []struct {
		name, help string
		get        func(netDev) uint64
	}{
		{"container_network_receive_bytes_total", "Cumulative count of bytes received", func(d netDev) uint64 { return d.rxBytes }},
		{"container_network_receive_packets_total", "Cumulative count of packets received", func(d netDev) uint64 { return d.rxPackets }},
		{"container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving", func(d netDev) uint64 { return d.rxDropped }},
		{"container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", func(d netDev) uint64 { return d.rxErrors }},
		{"container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", func(d netDev) uint64 { return d.txBytes }},
		{"container_network_transmit_packets_total", "Cumulative count of packets transmitted", func(d netDev) uint64 { return d.txPackets }},
		{"container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting", func(d netDev) uint64 { return d.txDropped }},
		{"container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", func(d netDev) uint64 { return d.txErrors }},
	} {
		out = append(out, series{name: f.name, help: f.help, counter: true, extra: []string{"interface"},
			values: func(s *cgroupStats) []sample {
				var v []sample
				for _, d := range s.net {
					v = append(v, sample{v: float64(f.get(d)), labels: []string{d.name}})
				}
				return v
			}})
	}
	return out
}()

// emit sends one cgroup's series: the spec (no timestamp) and the
// sampled numbers (stamped now), as cadvisor's collector does.
func (c *Collector) emit(ch chan<- prometheus.Metric, cgroup string, id identity, st *cgroupStats, now time.Time) {
	values := id.values(cgroup)
	gauge := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, containerLabels, nil), prometheus.GaugeValue, v, values...)
	}
	created := st.created
	if !id.created.IsZero() {
		created = id.created
	}
	gauge("container_creation_time_seconds", "Container creation time since unix epoch in seconds.", float64(created.Unix()))
	gauge("container_start_time_seconds", "Start time of the container since unix epoch in seconds.", float64(st.created.Unix()))
	if st.hasCPU {
		gauge("container_spec_cpu_period", "CPU period of the container.", float64(st.cpuPeriod))
		if st.cpuQuota != 0 {
			gauge("container_spec_cpu_quota", "CPU quota of the container.", float64(st.cpuQuota))
		}
		gauge("container_spec_cpu_shares", "CPU share of the container.", float64(st.cpuShares))
	}
	if st.hasMemory {
		gauge("container_spec_memory_limit_bytes", "Memory limit for the container.", specMemory(st.memLimit))
		gauge("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", specMemory(st.memSwapLimit))
		gauge("container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.", specMemory(st.memReserve))
	}
	stamped := func(name, help string, vt prometheus.ValueType, extra []string, s sample) {
		desc := prometheus.NewDesc(name, help, append(slicesClone(containerLabels), extra...), nil)
		m := prometheus.MustNewConstMetric(desc, vt, s.v, append(slicesClone(values), s.labels...)...)
		ch <- prometheus.NewMetricWithTimestamp(now, m)
	}
	stamped("container_last_seen", "Last time a container was seen by the exporter", prometheus.GaugeValue, nil, sample{v: float64(now.Unix())})
	// No runtime health checks under CRI: -1, cadvisor's "none defined".
	stamped("container_health_state", "The result of the container's health check", prometheus.GaugeValue, nil, sample{v: -1})
	// fsSeries and ulimitSeries give samples only for the cgroups read
	// for them (see Collect).
	families := [][]series{cpuSeries, memorySeries, memoryV2Series, processSeries, ulimitSeries, oomSeries, fsSeries, blkioSeries, pressureSeries}
	if cgroup == "/" || id.sandbox {
		families = append(families, networkSeries)
	}
	for _, fam := range families {
		for _, sr := range fam {
			if sr.when != nil && !sr.when(st, id) {
				continue
			}
			vt := prometheus.GaugeValue
			if sr.counter {
				vt = prometheus.CounterValue
			}
			for _, s := range sr.values(st) {
				stamped(sr.name, sr.help, vt, sr.extra, s)
			}
		}
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
