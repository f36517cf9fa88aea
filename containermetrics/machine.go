package containermetrics

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// machineInfo is the machine's description as cadvisor's MachineInfo
// gives the machine_* series, read once.
type machineInfo struct {
	at                            time.Time
	cores, physicalCores, sockets int
	memory, swap                  uint64
	machineID, systemUUID, bootID string
	kernel, os                    string
}

// readMachine reads /proc/cpuinfo (logical CPUs, unique core and
// physical package IDs), /proc/meminfo (MemTotal, SwapTotal), the
// machine, system and boot IDs, the kernel release and the OS name.
func readMachine(procDir, rootDir string, now time.Time) (machineInfo, error) {
	m := machineInfo{at: now}
	f, err := os.Open(filepath.Join(procDir, "cpuinfo"))
	if err != nil {
		return m, fmt.Errorf("containermetrics: machine info: %w", err)
	}
	defer f.Close()
	coreIDs, packages := map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "processor":
			m.cores++
		case "core id":
			coreIDs[strings.TrimSpace(v)] = true
		case "physical id":
			packages[strings.TrimSpace(v)] = true
		}
	}
	m.physicalCores, m.sockets = len(coreIDs), len(packages)
	mem := readFlatKB(filepath.Join(procDir, "meminfo"))
	m.memory, m.swap = mem["MemTotal"], mem["SwapTotal"]
	if m.memory == 0 {
		return m, fmt.Errorf("containermetrics: machine info: no MemTotal in %s", filepath.Join(procDir, "meminfo"))
	}
	first := func(paths ...string) string {
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
		return ""
	}
	m.machineID = first(filepath.Join(rootDir, "etc/machine-id"), filepath.Join(rootDir, "var/lib/dbus/machine-id"))
	// cadvisor's order: DMI, the device tree (ppc64), then /etc/machine-id
	// (meant for s390x, reached on any machine without the others).
	m.systemUUID = strings.TrimRight(first(filepath.Join(rootDir, "sys/class/dmi/id/product_uuid"),
		filepath.Join(procDir, "device-tree/system-id"), filepath.Join(procDir, "device-tree/vm,uuid"),
		filepath.Join(rootDir, "etc/machine-id")), "\x00")
	m.bootID = first(filepath.Join(procDir, "sys/kernel/random/boot_id"))
	m.kernel = first(filepath.Join(procDir, "sys/kernel/osrelease"))
	m.os = osName(filepath.Join(rootDir, "etc/os-release"))
	return m, nil
}

// readFlatKB reads /proc/meminfo into bytes.
func readFlatKB(path string) map[string]uint64 {
	out := map[string]uint64{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		out[k] = n
	}
	return out
}

// osName is PRETTY_NAME of os-release, as cadvisor's osVersion.
func osName(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "Linux"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "Linux"
}

var machineLabels = []string{"machine_id", "system_uuid", "boot_id"}

// machineCollector serves the machine_* series of cadvisor's machine
// collector (without the topology, NUMA and DIMM series kubelet does not
// ask for or this machine cannot describe).
type machineCollector struct{ m machineInfo }

func (machineCollector) Describe(chan<- *prometheus.Desc) {}

func (mc machineCollector) Collect(ch chan<- prometheus.Metric) {
	m := mc.m
	base := []string{m.machineID, m.systemUUID, m.bootID}
	send := func(name, help string, v float64, extra map[string]string) {
		labels, values := slicesClone(machineLabels), slicesClone(base)
		for k, val := range extra {
			labels, values = append(labels, k), append(values, val)
		}
		desc := prometheus.NewDesc(name, help, labels, nil)
		ch <- prometheus.NewMetricWithTimestamp(m.at, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, values...))
	}
	send("machine_cpu_physical_cores", "Number of physical CPU cores.", float64(m.physicalCores), nil)
	send("machine_cpu_cores", "Number of logical CPU cores.", float64(m.cores), nil)
	send("machine_cpu_sockets", "Number of CPU sockets.", float64(m.sockets), nil)
	send("machine_cpu_books", "Number of CPU books.", 0, nil)
	send("machine_cpu_drawers", "Number of CPU drawers.", 0, nil)
	send("machine_memory_bytes", "Amount of memory installed on the machine.", float64(m.memory), nil)
	send("machine_swap_bytes", "Amount of swap memory available on the machine.", float64(m.swap), nil)
	send("machine_nvm_capacity", "NVM capacity value labeled by NVM mode (memory mode or app direct mode).", 0, map[string]string{"mode": "memory_mode"})
	send("machine_nvm_capacity", "NVM capacity value labeled by NVM mode (memory mode or app direct mode).", 0, map[string]string{"mode": "app_direct_mode"})
	send("machine_nvm_avg_power_budget_watts", "NVM power budget.", 0, nil)
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("machine_scrape_error",
		"1 if there was an error while getting machine metrics, 0 otherwise.", nil, nil), prometheus.GaugeValue, 0)
}
