package containermetrics

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

// fakeMountinfo has, in the kernel's order: the root ext4, a bind mount
// of the same disk (left out), proc and a netns (no plugin), two tmpfs
// (labelled by mountpoint, one with an escaped space), an overlay
// (labelled by its device number) and an xfs on a second disk.
const fakeMountinfo = `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
45 27 254:0 /tmp/x /var/lib/kubelet rw,relatime shared:1 - ext4 /dev/vda rw,discard
22 27 0:21 / /proc rw,nosuid - proc proc rw
105 27 0:4 net:[4026532796] /run/netns/cni-1 rw - nsfs nsfs rw
30 27 0:25 / /dev/shm rw,nosuid - tmpfs tmpfs rw
31 27 0:26 / /run/my\040dir rw - tmpfs tmpfs rw
119 27 0:77 / /run/containerd/rootfs rw,relatime - overlay overlay rw,lowerdir=/a,upperdir=/b
40 27 8:1 / /data rw - xfs /dev/sda1 rw
`

// fakeDiskstats: vda and sda1 are read; loop0 is not a disk cadvisor
// reads.
const fakeDiskstats = ` 254       0 vda 1253349 178079 78287642 2495461 4858476 1876576 685134816 7287114 3 852744 10152511 0 0 0 0
   8       1 sda1 10 1 80 7 20 2 160 9 0 12 16
   7       0 loop0 104 0 976 67 369 0 896 396 0 432 780 0 0 0 0
`

// fakeMachine writes the /proc and /etc files New reads.
func fakeMachine(t *testing.T, dir, proc string) {
	t.Helper()
	write(t, filepath.Join(proc, "cpuinfo"), "processor\t: 0\ncore id\t: 0\nphysical id\t: 0\n")
	write(t, filepath.Join(proc, "meminfo"), "MemTotal:       1000 kB\n")
	write(t, filepath.Join(proc, "stat"), "cpu 1 2 3\nbtime 100\n")
	write(t, filepath.Join(dir, "etc/machine-id"), "mid\n")
}

func TestPartitionsOf(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "mountinfo"), fakeMountinfo)
	mounts, err := readMountinfo(filepath.Join(dir, "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	got := partitionsOf(mounts)
	want := map[string]partition{
		"/dev/vda":     {mountpoint: "/", fsType: "ext4", major: 254},
		"/dev/shm":     {mountpoint: "/dev/shm", fsType: "tmpfs", minor: 25},
		"/run/my dir":  {mountpoint: "/run/my dir", fsType: "tmpfs", minor: 26},
		"overlay_0-77": {mountpoint: "/run/containerd/rootfs", fsType: "overlay", minor: 77},
		"/dev/sda1":    {mountpoint: "/data", fsType: "xfs", major: 8, minor: 1},
	}
	if !maps.Equal(got, want) {
		t.Errorf("partitions:\n got %v\nwant %v", got, want)
	}
}

func TestRootFilesystemSeries(t *testing.T) {
	dir := t.TempDir()
	cg, proc := filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc")
	fakeMachine(t, dir, proc)
	write(t, filepath.Join(proc, "self", "mountinfo"), fakeMountinfo)
	write(t, filepath.Join(proc, "diskstats"), fakeDiskstats)
	fakeCgroupV1(t, cg, "/", 9e9, 5000, 1000, -1)
	fakeCgroupV1(t, cg, "/kubepods", 8e9, 4000, 1000, -1)
	c, err := New(Config{Roots: []string{"/kubepods"}, CgroupRoot: cg, ProcDir: proc, RootDir: dir,
		Clock: clocktesting.NewFakePassiveClock(time.Unix(2000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	c.statfs = func(_ context.Context, mp string) (statfsResult, error) {
		switch mp {
		case "/":
			return statfsResult{capacity: 1000, free: 300, inodes: 50, inodesFree: 20}, nil
		case "/data":
			return statfsResult{}, errors.New("gone") // left out
		}
		return statfsResult{capacity: 10, free: 10, inodes: 5, inodesFree: 5}, nil
	}
	got := gather(t, c)
	want := map[string]float64{
		rootFS("container_fs_limit_bytes", "/dev/vda"):         1000,
		rootFS("container_fs_usage_bytes", "/dev/vda"):         700,
		rootFS("container_fs_inodes_total", "/dev/vda"):        50,
		rootFS("container_fs_inodes_free", "/dev/vda"):         20,
		rootFS("container_fs_reads_total", "/dev/vda"):         1253349,
		rootFS("container_fs_reads_merged_total", "/dev/vda"):  178079,
		rootFS("container_fs_sector_reads_total", "/dev/vda"):  78287642,
		rootFS("container_fs_writes_total", "/dev/vda"):        4858476,
		rootFS("container_fs_writes_merged_total", "/dev/vda"): 1876576,
		rootFS("container_fs_sector_writes_total", "/dev/vda"): 685134816,
		rootFS("container_fs_io_current", "/dev/vda"):          3,
		// Milliseconds divided by 1e9, as cadvisor serves them.
		rootFS("container_fs_read_seconds_total", "/dev/vda"):             0.002495461,
		rootFS("container_fs_write_seconds_total", "/dev/vda"):            0.007287114,
		rootFS("container_fs_io_time_seconds_total", "/dev/vda"):          0.000852744,
		rootFS("container_fs_io_time_weighted_seconds_total", "/dev/vda"): 0.010152511,
		// A tmpfs and an overlay: usage, and zero I/O.
		rootFS("container_fs_usage_bytes", "/dev/shm"):      0,
		rootFS("container_fs_limit_bytes", "/run/my dir"):   10,
		rootFS("container_fs_reads_total", "overlay_0-77"):  0,
		rootFS("container_fs_inodes_total", "overlay_0-77"): 5,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	devices := map[string]bool{}
	for k := range got {
		if !strings.HasPrefix(k, "container_fs_") {
			continue
		}
		if !strings.Contains(k, `id="/",`) {
			t.Errorf("%s: filesystems are served for the root cgroup only", k)
		}
		_, rest, _ := strings.Cut(k, `device="`)
		dev, _, _ := strings.Cut(rest, `"`)
		devices[dev] = true
	}
	if want := []string{"/dev/shm", "/dev/vda", "/run/my dir", "overlay_0-77"}; !slices.Equal(slices.Sorted(maps.Keys(devices)), want) {
		t.Errorf("devices %v, want %v", slices.Sorted(maps.Keys(devices)), want)
	}
}

// rootFS names a root cgroup's container_fs_* sample.
func rootFS(family, device string) string {
	return family + `{container="",device="` + device + `",id="/",image="",name="",namespace="",pod=""}`
}

// gather scrapes c: each sample's family and labels to its value.
func gather(t *testing.T, c *Collector) map[string]float64 {
	t.Helper()
	mfs, err := c.Gatherer(t.Context()).Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()+labelString(m)] = value(m)
		}
	}
	return got
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func TestUlimitsSeries(t *testing.T) {
	dir := t.TempDir()
	cg, proc := filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc")
	fakeMachine(t, dir, proc)
	limits := func(open string) string {
		return "Limit                     Soft Limit           Hard Limit           Units     \n" +
			"Max cpu time              unlimited            unlimited            seconds   \n" +
			"Max open files            " + open + "                files     \n" +
			"Max processes             1000                 1000                 processes \n"
	}
	write(t, filepath.Join(proc, "1", "limits"), limits("65536                65536"))
	write(t, filepath.Join(proc, "40", "limits"), limits("1024                 1048576"))
	write(t, filepath.Join(proc, "41", "limits"), limits("9                    9"))
	write(t, filepath.Join(proc, "50", "limits"), limits("unlimited            unlimited"))
	const uid, sandbox, app = "1234-5678", "aaaa", "bbbb"
	podCg := "/kubepods/besteffort/pod" + uid
	fakeCgroupV1(t, cg, "/", 9e9, 5000, 1000, -1)
	fakeCgroupV1(t, cg, "/kubepods", 8e9, 4000, 1000, -1)
	fakeCgroupV1(t, cg, "/kubepods/besteffort", 7e9, 3000, 1000, -1)
	fakeCgroupV1(t, cg, podCg, 6e9, 2000, 500, -1)
	fakeCgroupV1(t, cg, podCg+"/"+sandbox, 1e7, 100, 0, -1)
	fakeCgroupV1(t, cg, podCg+"/"+app, 5e9, 1900, 400, -1)
	write(t, filepath.Join(cg, "cpu", podCg+"/"+app, "cgroup.procs"), "41\n40\n")
	write(t, filepath.Join(cg, "cpu", podCg+"/"+sandbox, "cgroup.procs"), "50\n")
	write(t, filepath.Join(cg, "cpu", "/kubepods", "cgroup.procs"), "41\n") // not a container: none
	pods := podsFunc(func(context.Context, bool) ([]*nodekit.Pod, error) {
		return []*nodekit.Pod{{ID: types.UID(uid), Name: "web", Namespace: "ns",
			Sandboxes:  []*nodekit.Container{{ID: nodekit.ContainerID{Type: "containerd", ID: sandbox}}},
			Containers: []*nodekit.Container{{ID: nodekit.ContainerID{Type: "containerd", ID: app}, Name: "app", Image: "busybox"}},
		}}, nil
	})
	c, err := New(Config{Roots: []string{"/kubepods"}, Pods: pods, SandboxImage: "registry.k8s.io/pause:3.10.1",
		CgroupRoot: cg, ProcDir: proc, RootDir: dir, Clock: clocktesting.NewFakePassiveClock(time.Unix(2000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	var ulimits []string
	for k, v := range gather(t, c) {
		if strings.HasPrefix(k, "container_ulimits_soft") {
			ulimits = append(ulimits, k+" "+formatFloat(v))
		}
	}
	slices.Sort(ulimits)
	want := []string{
		`container_ulimits_soft{container="",id="/",image="",name="",namespace="",pod="",ulimit="max_open_files"} 65536`,
		`container_ulimits_soft{container="",id="` + podCg + `/aaaa",image="registry.k8s.io/pause:3.10.1",name="aaaa",namespace="ns",pod="web",ulimit="max_open_files"} -1`,
		`container_ulimits_soft{container="app",id="` + podCg + `/bbbb",image="docker.io/library/busybox:latest",name="bbbb",namespace="ns",pod="web",ulimit="max_open_files"} 1024`,
	}
	if !slices.Equal(ulimits, want) {
		t.Errorf("ulimits:\n got %q\nwant %q", ulimits, want)
	}
}

func TestReadUlimitsMalformed(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "7", "limits"), "Max open files            many                 10                   files\n")
	if got := readUlimits(dir, 7); got != nil {
		t.Errorf("unparsable soft limit: %v, want none", got)
	}
	if got := readUlimits(dir, 8); got != nil {
		t.Errorf("exited process: %v, want none", got)
	}
}
