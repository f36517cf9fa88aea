package containermetrics

import (
	"path/filepath"

	"github.com/nodekit/nodekit/internal/psi"
)

// pressure is a cgroup's PSI of CPU, memory and I/O (cgroup v2's
// cpu.pressure, memory.pressure and io.pressure).
type pressure struct{ cpu, memory, io psi.Stats }

// psiEnabled tells whether the unified hierarchy at root has pressure
// files, as kubelet decides whether to serve the pressure series.
func psiEnabled(root string) bool { return psi.Enabled(root) }

// readPressure reads the three pressure files of cgroup dir d.
func readPressure(d string) *pressure {
	return &pressure{
		cpu:    readPSI(filepath.Join(d, psi.CPUFile)),
		memory: readPSI(filepath.Join(d, psi.MemoryFile)),
		io:     readPSI(filepath.Join(d, psi.IOFile)),
	}
}

// readPSI reads one pressure file leniently, as cadvisor serves the
// series: a missing or unreadable file gives zeros, a field that does not
// parse is zero and the others are kept.
func readPSI(path string) psi.Stats {
	s, _ := psi.ReadFile(path)
	return s
}

func hasPressure(s *cgroupStats, _ identity) bool { return s.pressure != nil }

// us is microseconds (a PSI total, an iocost counter) in seconds.
func us(v uint64) float64 { return float64(v) / 1e6 }

// pressureSeries are cadvisor's PressureMetrics, which kubelet v1.37
// serves wherever PSI is enabled (KubeletPSI is GA): "waiting" is the
// some line's total, "stalled" the full line's, for every cgroup read.
var pressureSeries = []series{
	{name: "container_pressure_cpu_stalled_seconds_total", help: "Total time duration no tasks in the container could make progress due to CPU congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.cpu.Full.Total)) }},
	{name: "container_pressure_cpu_waiting_seconds_total", help: "Total time duration tasks in the container have waited due to CPU congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.cpu.Some.Total)) }},
	{name: "container_pressure_memory_stalled_seconds_total", help: "Total time duration no tasks in the container could make progress due to memory congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.memory.Full.Total)) }},
	{name: "container_pressure_memory_waiting_seconds_total", help: "Total time duration tasks in the container have waited due to memory congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.memory.Some.Total)) }},
	{name: "container_pressure_io_stalled_seconds_total", help: "Total time duration no tasks in the container could make progress due to IO congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.io.Full.Total)) }},
	{name: "container_pressure_io_waiting_seconds_total", help: "Total time duration tasks in the container have waited due to IO congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.io.Some.Total)) }},
}
