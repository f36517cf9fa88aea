package containermetrics

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// perDisk is one device's counters in a blkio file, by operation (Read,
// Write, Sync, Async, Discard, Total; "Count" for a file without one),
// as cadvisor's PerDiskStats.
type perDisk struct {
	major, minor uint64
	device       string // "" if no disk or filesystem has that number
	ops          map[string]uint64
}

// blkioStats is a cgroup's own block I/O counters, as cadvisor's
// DiskIoStats (the fields its Prometheus collector reads). Each is nil
// where the cgroup did no block I/O.
type blkioStats struct {
	serviceBytes, serviced, queued, sectors, serviceTime, merged []perDisk
	// The iocost controller's counters (v2 io.stat cost.usage, cost.wait,
	// cost.indebt, cost.indelay; microseconds), under "Count".
	costUsage, costWait, costIndebt, costIndelay []perDisk
}

// blkioFile names one counter file and the field it fills.
type blkioFile struct {
	name  string
	field func(*blkioStats) *[]perDisk
}

func bytesField(b *blkioStats) *[]perDisk    { return &b.serviceBytes }
func servicedField(b *blkioStats) *[]perDisk { return &b.serviced }

// blkioGroups are the v1 file sets, in the order the runtime's cgroup
// library tries them (BFQ with its debug files, BFQ, CFQ, throttle
// recursive, throttle): the first set whose first file has entries is
// read, and reading stops at the first of its files without any.
var blkioGroups = [][]blkioFile{
	{{"blkio.bfq.sectors_recursive", func(b *blkioStats) *[]perDisk { return &b.sectors }},
		{"blkio.bfq.io_service_time_recursive", func(b *blkioStats) *[]perDisk { return &b.serviceTime }},
		{"blkio.bfq.io_wait_time_recursive", nil},
		{"blkio.bfq.io_merged_recursive", func(b *blkioStats) *[]perDisk { return &b.merged }},
		{"blkio.bfq.io_queued_recursive", func(b *blkioStats) *[]perDisk { return &b.queued }},
		{"blkio.bfq.time_recursive", nil},
		{"blkio.bfq.io_serviced_recursive", servicedField},
		{"blkio.bfq.io_service_bytes_recursive", bytesField}},
	{{"blkio.bfq.io_serviced_recursive", servicedField}, {"blkio.bfq.io_service_bytes_recursive", bytesField}},
	{{"blkio.sectors_recursive", func(b *blkioStats) *[]perDisk { return &b.sectors }},
		{"blkio.io_service_time_recursive", func(b *blkioStats) *[]perDisk { return &b.serviceTime }},
		{"blkio.io_wait_time_recursive", nil},
		{"blkio.io_merged_recursive", func(b *blkioStats) *[]perDisk { return &b.merged }},
		{"blkio.io_queued_recursive", func(b *blkioStats) *[]perDisk { return &b.queued }},
		{"blkio.time_recursive", nil},
		{"blkio.io_serviced_recursive", servicedField},
		{"blkio.io_service_bytes_recursive", bytesField}},
	{{"blkio.throttle.io_serviced_recursive", servicedField}, {"blkio.throttle.io_service_bytes_recursive", bytesField}},
	{{"blkio.throttle.io_serviced", servicedField}, {"blkio.throttle.io_service_bytes", bytesField}},
}

// readBlkioV1 reads a v1 blkio cgroup directory; devName names a device
// number. A missing or unparsable file counts as one without entries.
func readBlkioV1(dir string, devName func(major, minor uint64) string) blkioStats {
	var b blkioStats
	for _, group := range blkioGroups {
		for i, f := range group {
			disks := readBlkioFile(filepath.Join(dir, f.name), devName)
			if disks == nil {
				if i == 0 {
					break // this scheduler's files are absent or empty: next set
				}
				return b
			}
			if f.field != nil {
				*f.field(&b) = disks
			}
			if i == len(group)-1 {
				return b
			}
		}
	}
	return b
}

// readBlkioFile parses "MAJOR:MINOR [OP] VALUE" lines (a last "Total N"
// line is skipped) into one perDisk per device, in first-seen order.
func readBlkioFile(path string, devName func(major, minor uint64) string) []perDisk {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []perDisk
	index := map[[2]uint64]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.FieldsFunc(sc.Text(), func(r rune) bool { return r == ' ' || r == ':' })
		if len(w) == 2 && w[0] == "Total" {
			continue
		}
		if len(w) != 3 && len(w) != 4 {
			return nil
		}
		maj, err1 := strconv.ParseUint(w[0], 10, 64)
		min, err2 := strconv.ParseUint(w[1], 10, 64)
		v, err3 := strconv.ParseUint(w[len(w)-1], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil
		}
		op := "Count"
		if len(w) == 4 {
			op = w[2]
		}
		k := [2]uint64{maj, min}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, perDisk{major: maj, minor: min, device: devName(maj, min), ops: map[string]uint64{}})
		}
		out[i].ops[op] = v
	}
	if sc.Err() != nil {
		return nil
	}
	return out
}

// loadDiskNames lists the machine's block devices once, as cadvisor's
// machine info does (sysDir/block/NAME/dev; loop, ram and sr devices and
// hidden NVMe paths left out), by device number, as "/dev/NAME".
func loadDiskNames(sysDir string) map[[2]uint64]string {
	entries, err := os.ReadDir(filepath.Join(sysDir, "block"))
	if err != nil {
		return nil
	}
	out := map[[2]uint64]string{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "loop") || strings.HasPrefix(name, "ram") || strings.HasPrefix(name, "sr") {
			continue
		}
		dir := filepath.Join(sysDir, "block", name)
		if strings.TrimSpace(readString(dir, "hidden")) == "1" {
			continue
		}
		var maj, min uint64
		if n, err := fmt.Sscanf(readString(dir, "dev"), "%d:%d", &maj, &min); err != nil || n != 2 {
			continue
		}
		out[[2]uint64{maj, min}] = "/dev/" + name
	}
	return out
}

// deviceNamer names a device number as cadvisor does: a disk first, else
// a filesystem of that number (its device label), else "".
func deviceNamer(disks map[[2]uint64]string, parts map[string]partition) func(major, minor uint64) string {
	return func(major, minor uint64) string {
		if d, ok := disks[[2]uint64{major, minor}]; ok {
			return d
		}
		for label, p := range parts {
			if p.major == major && p.minor == minor {
				return label
			}
		}
		return ""
	}
}

// blkioSamples are one operation's values, a sample per device, through
// conv (raw counts, or nanoseconds as seconds).
func blkioSamples(disks []perDisk, op string, conv func(uint64) float64) []sample {
	out := make([]sample, 0, len(disks))
	for _, d := range disks {
		out = append(out, sample{v: conv(d.ops[op]), labels: []string{d.device}})
	}
	return out
}

func count(v uint64) float64 { return float64(v) }

// blkioSeries are the families of cadvisor's DiskIOMetrics only a
// cgroup's blkio counters feed; the others (container_fs_reads_total,
// ...) take per-device samples from it too (fsSeries).
var blkioSeries = []series{
	{name: "container_fs_reads_bytes_total", help: "Cumulative count of bytes read", counter: true, extra: []string{"device"},
		values: func(s *cgroupStats) []sample { return blkioSamples(s.blkio.serviceBytes, "Read", count) }},
	{name: "container_fs_writes_bytes_total", help: "Cumulative count of bytes written", counter: true, extra: []string{"device"},
		values: func(s *cgroupStats) []sample { return blkioSamples(s.blkio.serviceBytes, "Write", count) }},
	{name: "container_fs_io_cost_usage_seconds_total", help: "Cumulative IOCost usage in seconds", counter: true, extra: []string{"device"},
		values: func(s *cgroupStats) []sample { return blkioSamples(s.blkio.costUsage, "Count", us) }},
	{name: "container_fs_io_cost_wait_seconds_total", help: "Cumulative IOCost wait in seconds", counter: true, extra: []string{"device"},
		values: func(s *cgroupStats) []sample { return blkioSamples(s.blkio.costWait, "Count", us) }},
	{name: "container_fs_io_cost_indebt_seconds_total", help: "Cumulative IOCost debt in seconds", counter: true, extra: []string{"device"},
		values: func(s *cgroupStats) []sample { return blkioSamples(s.blkio.costIndebt, "Count", us) }},
	{name: "container_fs_io_cost_indelay_seconds_total", help: "Cumulative IOCost delay in seconds", counter: true, extra: []string{"device"},
		values: func(s *cgroupStats) []sample { return blkioSamples(s.blkio.costIndelay, "Count", us) }},
	{name: "container_blkio_device_usage_total", help: "Blkio Device bytes usage", counter: true,
		extra: []string{"device", "major", "minor", "operation"},
		values: func(s *cgroupStats) []sample {
			var out []sample
			for _, d := range s.blkio.serviceBytes {
				maj, min := strconv.FormatUint(d.major, 10), strconv.FormatUint(d.minor, 10)
				for op, v := range d.ops {
					out = append(out, sample{v: float64(v), labels: []string{d.device, maj, min, op}})
				}
			}
			return out
		}},
}

// blkioOf picks the blkio field and operation a fs I/O family takes its
// per-device samples from ("" for none: the weighted I/O time).
func blkioOf(name string) (func(*blkioStats) []perDisk, string, func(uint64) float64) {
	switch name {
	case "container_fs_reads_total", "container_fs_writes_total":
		return func(b *blkioStats) []perDisk { return b.serviced }, opOf(name), count
	case "container_fs_sector_reads_total", "container_fs_sector_writes_total":
		return func(b *blkioStats) []perDisk { return b.sectors }, opOf(name), count
	case "container_fs_reads_merged_total", "container_fs_writes_merged_total":
		return func(b *blkioStats) []perDisk { return b.merged }, opOf(name), count
	case "container_fs_read_seconds_total", "container_fs_write_seconds_total":
		return func(b *blkioStats) []perDisk { return b.serviceTime }, opOf(name), ns
	case "container_fs_io_current":
		return func(b *blkioStats) []perDisk { return b.queued }, "Total", count
	case "container_fs_io_time_seconds_total":
		return func(b *blkioStats) []perDisk { return b.serviceTime }, "Total", ns
	}
	return nil, "", nil
}

func opOf(name string) string {
	if strings.Contains(name, "read") {
		return "Read"
	}
	return "Write"
}

// readIoStatV2 reads a v2 cgroup's io.stat ("MAJOR:MINOR rbytes=N
// wbytes=N rios=N wios=N ...") as the runtime's cgroup library maps it
// onto the v1 tables: rbytes and wbytes to the bytes' Read and Write,
// rios and wios to the serviced counts', and the iocost controller's
// cost.usage, cost.wait, cost.indebt and cost.indelay (present only where
// it is enabled) to their own tables. dbytes and dios are not served. A
// device is in a table only if its line has a field of that table.
func readIoStatV2(dir string, devName func(major, minor uint64) string) blkioStats {
	var b blkioStats
	f, err := os.Open(filepath.Join(dir, "io.stat"))
	if err != nil {
		return b
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) < 2 {
			continue
		}
		var maj, min uint64
		if n, err := fmt.Sscanf(w[0], "%d:%d", &maj, &min); err != nil || n != 2 {
			continue
		}
		b.addIoStatLine(maj, min, devName(maj, min), w[1:])
	}
	return b
}

// addIoStatLine adds one device's io.stat fields ("rbytes=N", ...) to b:
// a table gets an entry for the device only when the line has a field of
// it.
func (b *blkioStats) addIoStatLine(maj, min uint64, name string, fields []string) {
	ops := map[*[]perDisk]map[string]uint64{}
	set := func(table *[]perDisk, op string, v uint64) {
		if ops[table] == nil {
			ops[table] = map[string]uint64{}
		}
		ops[table][op] = v
	}
	for _, kv := range fields {
		k, val, _ := strings.Cut(kv, "=")
		v, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "rbytes":
			set(&b.serviceBytes, "Read", v)
		case "wbytes":
			set(&b.serviceBytes, "Write", v)
		case "rios":
			set(&b.serviced, "Read", v)
		case "wios":
			set(&b.serviced, "Write", v)
		case "cost.usage":
			set(&b.costUsage, "Count", v)
		case "cost.wait":
			set(&b.costWait, "Count", v)
		case "cost.indebt":
			set(&b.costIndebt, "Count", v)
		case "cost.indelay":
			set(&b.costIndelay, "Count", v)
		}
	}
	for _, table := range []*[]perDisk{&b.serviceBytes, &b.serviced, &b.costUsage, &b.costWait, &b.costIndebt, &b.costIndelay} {
		if o := ops[table]; o != nil {
			*table = append(*table, perDisk{major: maj, minor: min, device: name, ops: o})
		}
	}
}
