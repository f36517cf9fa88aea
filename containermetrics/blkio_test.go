package containermetrics

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// throttleBytes and throttleServiced are a cgroup's v1 throttle
// counters for a disk (254:0, /sys/block/vda), a partition known from the
// mount table only (8:1, /dev/sda1) and an unknown device (7:5).
const throttleBytes = `254:0 Read 4096
254:0 Write 20971520
254:0 Sync 20971520
254:0 Async 4096
254:0 Discard 0
254:0 Total 20975616
8:1 Read 512
8:1 Write 0
7:5 Write 1
Total 20976129
`

const throttleServiced = `254:0 Read 1
254:0 Write 20
254:0 Total 21
8:1 Read 3
Total 24
`

func TestBlkioSeriesV1(t *testing.T) {
	dir := t.TempDir()
	cg, proc := filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc")
	fakeMachine(t, dir, proc)
	write(t, filepath.Join(proc, "self", "mountinfo"), fakeMountinfo)
	write(t, filepath.Join(dir, "sys/block/vda/dev"), "254:0\n")
	write(t, filepath.Join(dir, "sys/block/loop0/dev"), "7:5\n") // not a disk cadvisor names
	fakeCgroupV1(t, cg, "/", 9e9, 5000, 1000, -1)
	write(t, filepath.Join(cg, "blkio", "blkio.throttle.io_service_bytes_recursive"), "Total 0\n")
	fakeCgroupV1(t, cg, "/kubepods", 8e9, 4000, 1000, -1)
	// BFQ files present but empty: the throttle ones are read.
	kp := filepath.Join(cg, "blkio", "kubepods")
	write(t, filepath.Join(kp, "blkio.bfq.io_serviced_recursive"), "Total 0\n")
	write(t, filepath.Join(kp, "blkio.bfq.io_service_bytes_recursive"), "Total 0\n")
	write(t, filepath.Join(kp, "blkio.throttle.io_serviced_recursive"), throttleServiced)
	write(t, filepath.Join(kp, "blkio.throttle.io_service_bytes_recursive"), throttleBytes)
	fakeCgroupV1(t, cg, "/kubepods/besteffort", 7e9, 3000, 1000, -1) // no blkio files: no I/O
	c, err := New(Config{Roots: []string{"/kubepods"}, CgroupRoot: cg, ProcDir: proc, RootDir: dir,
		Clock: clocktesting.NewFakePassiveClock(time.Unix(2000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	c.statfs = func(_ context.Context, _ string) (statfsResult, error) { return statfsResult{}, errors.New("none") }
	var got []string
	for k, v := range gather(t, c) {
		if (strings.HasPrefix(k, "container_fs_") || strings.HasPrefix(k, "container_blkio_")) && !strings.Contains(k, "_io_cost_") {
			got = append(got, k+" "+strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	slices.Sort(got)
	l := func(family, device string) string {
		return family + `{container="",device="` + device + `",id="/kubepods",image="",name="",namespace="",pod=""}`
	}
	u := func(device, maj, min, op string) string {
		return `container_blkio_device_usage_total{container="",device="` + device + `",id="/kubepods",image="",major="` + maj +
			`",minor="` + min + `",name="",namespace="",operation="` + op + `",pod=""}`
	}
	want := []string{
		u("", "7", "5", "Write") + " 1",
		u("/dev/sda1", "8", "1", "Read") + " 512",
		u("/dev/sda1", "8", "1", "Write") + " 0",
		u("/dev/vda", "254", "0", "Async") + " 4096",
		u("/dev/vda", "254", "0", "Discard") + " 0",
		u("/dev/vda", "254", "0", "Read") + " 4096",
		u("/dev/vda", "254", "0", "Sync") + " 20971520",
		u("/dev/vda", "254", "0", "Total") + " 20975616",
		u("/dev/vda", "254", "0", "Write") + " 20971520",
		l("container_fs_reads_bytes_total", "") + " 0",
		l("container_fs_reads_bytes_total", "/dev/sda1") + " 512",
		l("container_fs_reads_bytes_total", "/dev/vda") + " 4096",
		l("container_fs_reads_total", "/dev/sda1") + " 3",
		l("container_fs_reads_total", "/dev/vda") + " 1",
		l("container_fs_writes_bytes_total", "") + " 1",
		l("container_fs_writes_bytes_total", "/dev/sda1") + " 0",
		l("container_fs_writes_bytes_total", "/dev/vda") + " 20971520",
		l("container_fs_writes_total", "/dev/sda1") + " 0",
		l("container_fs_writes_total", "/dev/vda") + " 20",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("block I/O series:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

func TestReadBlkioV1Schedulers(t *testing.T) {
	name := func(major, minor uint64) string { return "d" + formatFloat(float64(major)) }
	dir := t.TempDir()
	// CFQ: its full set, ops and "Count" (sectors has no op).
	write(t, filepath.Join(dir, "cfq", "blkio.sectors_recursive"), "8:0 40\n")
	write(t, filepath.Join(dir, "cfq", "blkio.io_service_time_recursive"), "8:0 Read 2000000000\n8:0 Total 3000000000\n")
	write(t, filepath.Join(dir, "cfq", "blkio.io_wait_time_recursive"), "8:0 Read 1\n")
	write(t, filepath.Join(dir, "cfq", "blkio.io_merged_recursive"), "8:0 Write 7\n")
	write(t, filepath.Join(dir, "cfq", "blkio.io_queued_recursive"), "8:0 Total 2\n")
	write(t, filepath.Join(dir, "cfq", "blkio.time_recursive"), "8:0 9\n")
	write(t, filepath.Join(dir, "cfq", "blkio.io_serviced_recursive"), "8:0 Read 5\n")
	write(t, filepath.Join(dir, "cfq", "blkio.io_service_bytes_recursive"), "8:0 Read 4096\n")
	b := readBlkioV1(filepath.Join(dir, "cfq"), name)
	if len(b.sectors) != 1 || b.sectors[0].ops["Count"] != 40 || b.sectors[0].device != "d8" ||
		b.serviceTime[0].ops["Total"] != 3e9 || b.merged[0].ops["Write"] != 7 || b.queued[0].ops["Total"] != 2 ||
		b.serviced[0].ops["Read"] != 5 || b.serviceBytes[0].ops["Read"] != 4096 {
		t.Errorf("CFQ: %+v", b)
	}
	// BFQ wins over throttle when its first file has entries; a set stops
	// at its first empty file.
	write(t, filepath.Join(dir, "bfq", "blkio.bfq.io_serviced_recursive"), "8:0 Read 1\n")
	write(t, filepath.Join(dir, "bfq", "blkio.bfq.io_service_bytes_recursive"), "Total 0\n")
	write(t, filepath.Join(dir, "bfq", "blkio.throttle.io_serviced_recursive"), "8:0 Read 9\n")
	write(t, filepath.Join(dir, "bfq", "blkio.throttle.io_service_bytes_recursive"), "8:0 Read 9\n")
	b = readBlkioV1(filepath.Join(dir, "bfq"), name)
	if len(b.serviced) != 1 || b.serviced[0].ops["Read"] != 1 || b.serviceBytes != nil {
		t.Errorf("BFQ: %+v", b)
	}
	// A malformed file is one without entries.
	write(t, filepath.Join(dir, "bad", "blkio.throttle.io_serviced_recursive"), "8:0 Read many\n")
	if b = readBlkioV1(filepath.Join(dir, "bad"), name); b.serviced != nil {
		t.Errorf("malformed: %+v", b)
	}
}

func TestReadIoStatV2(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "io.stat"), "254:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n"+
		"8:16 dbytes=5 dios=1\n")
	b := readIoStatV2(dir, func(major, _ uint64) string { return map[uint64]string{254: "/dev/vda"}[major] })
	if len(b.serviceBytes) != 1 || len(b.serviced) != 1 || b.serviceBytes[0].device != "/dev/vda" ||
		b.serviceBytes[0].ops["Read"] != 4096 || b.serviceBytes[0].ops["Write"] != 8192 ||
		b.serviced[0].ops["Read"] != 1 || b.serviced[0].ops["Write"] != 2 {
		t.Errorf("io.stat: %+v", b)
	}
	if b.costUsage != nil || b.costWait != nil || b.costIndebt != nil || b.costIndelay != nil {
		t.Errorf("iocost tables without cost.* fields: %+v", b)
	}
}

// With the iocost controller, io.stat has cost.* fields (microseconds):
// served per device as container_fs_io_cost_*_seconds_total, as cadvisor.
func TestIoCostSeriesV2(t *testing.T) {
	dir := t.TempDir()
	cg, proc := filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc")
	fakeMachine(t, dir, proc)
	write(t, filepath.Join(dir, "sys/block/vda/dev"), "254:0\n")
	write(t, filepath.Join(cg, "cgroup.controllers"), "cpu memory io pids\n")
	fakeCgroupV2(t, cg, "/", nil)
	fakeCgroupV2(t, cg, "/kubepods", nil)
	write(t, filepath.Join(cg, "kubepods", "io.stat"), "254:0 rbytes=4096 wbytes=0 rios=1 wios=0 dbytes=0 dios=0 "+
		"cost.vrate=100.00 cost.usage=1500000 cost.wait=250000 cost.indebt=3 cost.indelay=0\n"+
		"8:16 rbytes=1 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n")
	c, err := New(Config{Roots: []string{"/kubepods"}, CgroupRoot: cg, ProcDir: proc, RootDir: dir,
		Clock: clocktesting.NewFakePassiveClock(time.Unix(2000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	c.statfs = func(_ context.Context, _ string) (statfsResult, error) { return statfsResult{capacity: 1}, nil }
	got := map[string]float64{}
	for k, v := range gather(t, c) {
		if strings.HasPrefix(k, "container_fs_io_cost_") {
			got[k] = v
		}
	}
	l := func(family string) string {
		return "container_fs_io_cost_" + family + `_seconds_total{container="",device="/dev/vda",id="/kubepods",image="",name="",namespace="",pod=""}`
	}
	want := map[string]float64{l("usage"): 1.5, l("wait"): 0.25, l("indebt"): 3e-6, l("indelay"): 0}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d iocost series, want %d (none for 8:16, which has no cost fields): %v", len(got), len(want), got)
	}
}

// TestRootBlkioAndFilesystemSameDevice: the root's blkio counters and its
// filesystems both name /dev/vda; one sample each (the blkio one), so the
// scrape does not fail on a repeated label set.
func TestRootBlkioAndFilesystemSameDevice(t *testing.T) {
	dir := t.TempDir()
	cg, proc := filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc")
	fakeMachine(t, dir, proc)
	write(t, filepath.Join(proc, "self", "mountinfo"), fakeMountinfo)
	write(t, filepath.Join(proc, "diskstats"), fakeDiskstats)
	write(t, filepath.Join(dir, "sys/block/vda/dev"), "254:0\n")
	fakeCgroupV1(t, cg, "/", 9e9, 5000, 1000, -1)
	write(t, filepath.Join(cg, "blkio", "blkio.throttle.io_serviced_recursive"), throttleServiced)
	write(t, filepath.Join(cg, "blkio", "blkio.throttle.io_service_bytes_recursive"), throttleBytes)
	fakeCgroupV1(t, cg, "/kubepods", 8e9, 4000, 1000, -1)
	c, err := New(Config{Roots: []string{"/kubepods"}, CgroupRoot: cg, ProcDir: proc, RootDir: dir,
		Clock: clocktesting.NewFakePassiveClock(time.Unix(2000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	c.statfs = func(_ context.Context, _ string) (statfsResult, error) { return statfsResult{capacity: 1}, nil }
	got := gather(t, c) // fails on a repeated label set
	if v := got[rootFS("container_fs_reads_total", "/dev/vda")]; v != 1 {
		t.Errorf("root reads_total /dev/vda = %v, want the blkio count 1", v)
	}
	if v := got[rootFS("container_fs_reads_total", "/dev/sda1")]; v != 3 {
		t.Errorf("root reads_total /dev/sda1 = %v, want the blkio count 3", v)
	}
	if v, ok := got[rootFS("container_fs_usage_bytes", "/dev/vda")]; !ok || v != 1 {
		t.Errorf("root usage_bytes /dev/vda = %v (present %v), want 1", v, ok)
	}
}
