package containermetrics

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// psiLine is one line ("some" or "full") of a cgroup v2 *.pressure file:
// the stall averages in percent and the total stall time in
// microseconds.
type psiLine struct {
	avg10, avg60, avg300 float64
	total                uint64
}

// psi is a cgroup's pressure of one resource: Some is the time at least
// one task waited, Full the time all non-idle tasks were stalled at once.
type psi struct{ some, full psiLine }

// pressure is a cgroup's PSI of CPU, memory and I/O (cgroup v2's
// cpu.pressure, memory.pressure and io.pressure).
type pressure struct{ cpu, memory, io psi }

// psiEnabled tells whether the unified hierarchy at root has pressure
// files, as kubelet decides whether to serve the pressure series: the
// root cgroup's cpu.pressure exists (cgroup v2 with CONFIG_PSI, not
// booted with psi=0).
func psiEnabled(root string) bool {
	return fileExists(filepath.Join(root, "cpu.pressure"))
}

// readPressure reads the three pressure files of cgroup dir d. A file
// that is missing or unreadable gives zeros, as cadvisor serves it.
func readPressure(d string) *pressure {
	return &pressure{
		cpu:    readPSI(filepath.Join(d, "cpu.pressure")),
		memory: readPSI(filepath.Join(d, "memory.pressure")),
		io:     readPSI(filepath.Join(d, "io.pressure")),
	}
}

// readPSI parses "some avg10=0.00 avg60=0.00 avg300=0.00 total=0" and
// the same "full" line; fields it does not know are ignored.
func readPSI(path string) psi {
	var out psi
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		var line *psiLine
		switch fields[0] {
		case "some":
			line = &out.some
		case "full":
			line = &out.full
		default:
			continue
		}
		for _, kv := range fields[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			parsePSIField(line, k, v)
		}
	}
	return out
}

func parsePSIField(line *psiLine, k, v string) {
	if k == "total" {
		line.total, _ = strconv.ParseUint(v, 10, 64)
		return
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return
	}
	switch k {
	case "avg10":
		line.avg10 = f
	case "avg60":
		line.avg60 = f
	case "avg300":
		line.avg300 = f
	}
}

func hasPressure(s *cgroupStats, _ identity) bool { return s.pressure != nil }

// us is a PSI total (microseconds) in seconds.
func us(v uint64) float64 { return float64(v) / 1e6 }

// pressureSeries are cadvisor's PressureMetrics, which kubelet v1.37
// serves wherever PSI is enabled (KubeletPSI is GA): "waiting" is the
// some line's total, "stalled" the full line's, for every cgroup read.
var pressureSeries = []series{
	{name: "container_pressure_cpu_stalled_seconds_total", help: "Total time duration no tasks in the container could make progress due to CPU congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.cpu.full.total)) }},
	{name: "container_pressure_cpu_waiting_seconds_total", help: "Total time duration tasks in the container have waited due to CPU congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.cpu.some.total)) }},
	{name: "container_pressure_memory_stalled_seconds_total", help: "Total time duration no tasks in the container could make progress due to memory congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.memory.full.total)) }},
	{name: "container_pressure_memory_waiting_seconds_total", help: "Total time duration tasks in the container have waited due to memory congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.memory.some.total)) }},
	{name: "container_pressure_io_stalled_seconds_total", help: "Total time duration no tasks in the container could make progress due to IO congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.io.full.total)) }},
	{name: "container_pressure_io_waiting_seconds_total", help: "Total time duration tasks in the container have waited due to IO congestion.",
		counter: true, when: hasPressure, values: func(s *cgroupStats) []sample { return one(us(s.pressure.io.some.total)) }},
}
