package containermetrics

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/psi"
)

// fakeCgroupV2 writes a cgroup v2 cgroup with cpu.stat and, if given,
// the three pressure files' "some" and "full" totals (microseconds).
func fakeCgroupV2(t *testing.T, root, name string, totals map[string][2]uint64) {
	t.Helper()
	d := filepath.Join(root, name)
	write(t, filepath.Join(d, "cpu.stat"), "usage_usec 1000\nuser_usec 600\nsystem_usec 400\n")
	write(t, filepath.Join(d, "cgroup.procs"), "")
	for res, tot := range totals {
		write(t, filepath.Join(d, res+".pressure"), fmt.Sprintf(
			"some avg10=1.50 avg60=0.75 avg300=0.25 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=%d\n", tot[0], tot[1]))
	}
}

func pressureOf(t *testing.T, c *Collector) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, v := range gather(t, c) {
		if strings.HasPrefix(k, "container_pressure_") {
			out[k] = v
		}
	}
	return out
}

func TestPressureSeriesV2(t *testing.T) {
	dir := t.TempDir()
	cg, proc := filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc")
	fakeMachine(t, dir, proc)
	write(t, filepath.Join(cg, "cgroup.controllers"), "cpu memory io pids\n")
	fakeCgroupV2(t, cg, "/", map[string][2]uint64{"cpu": {7_000_000, 0}, "memory": {1, 0}, "io": {2, 1}})
	fakeCgroupV2(t, cg, "/kubepods", map[string][2]uint64{"cpu": {2_500_000, 500_000}, "memory": {1_000_000, 250_000}, "io": {3_000_000, 1_500_000}})
	fakeCgroupV2(t, cg, "/kubepods/besteffort", nil) // no pressure files: zeros
	c, err := New(Config{Roots: []string{"/kubepods"}, CgroupRoot: cg, ProcDir: proc, RootDir: dir,
		Clock: clocktesting.NewFakePassiveClock(time.Unix(2000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	got := pressureOf(t, c)
	l := func(family, id string) string {
		return "container_pressure_" + family + `_seconds_total{container="",id="` + id + `",image="",name="",namespace="",pod=""}`
	}
	want := map[string]float64{
		l("cpu_waiting", "/"): 7, l("cpu_stalled", "/"): 0,
		l("memory_waiting", "/"): 1e-6, l("memory_stalled", "/"): 0,
		l("io_waiting", "/"): 2e-6, l("io_stalled", "/"): 1e-6,
		l("cpu_waiting", "/kubepods"): 2.5, l("cpu_stalled", "/kubepods"): 0.5,
		l("memory_waiting", "/kubepods"): 1, l("memory_stalled", "/kubepods"): 0.25,
		l("io_waiting", "/kubepods"): 3, l("io_stalled", "/kubepods"): 1.5,
	}
	for _, fam := range []string{"cpu_waiting", "cpu_stalled", "memory_waiting", "memory_stalled", "io_waiting", "io_stalled"} {
		want[l(fam, "/kubepods/besteffort")] = 0
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d pressure series, want %d: %v", len(got), len(want), got)
	}
}

// Without a root cpu.pressure (cgroup v2 without PSI) and under cgroup v1
// no pressure series are served, as kubelet serves none.
func TestPressureSeriesOff(t *testing.T) {
	for _, v2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			dir := t.TempDir()
			cg, proc := filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc")
			fakeMachine(t, dir, proc)
			if v2 {
				write(t, filepath.Join(cg, "cgroup.controllers"), "cpu memory\n")
				fakeCgroupV2(t, cg, "/", nil)
				fakeCgroupV2(t, cg, "/kubepods", map[string][2]uint64{"cpu": {5, 5}})
			} else {
				fakeCgroupV1(t, cg, "/", 9e9, 5000, 1000, -1)
				fakeCgroupV1(t, cg, "/kubepods", 8e9, 4000, 1000, -1)
				write(t, filepath.Join(cg, "cpu", "kubepods", "cpu.pressure"), "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n")
			}
			c, err := New(Config{Roots: []string{"/kubepods"}, CgroupRoot: cg, ProcDir: proc, RootDir: dir,
				Clock: clocktesting.NewFakePassiveClock(time.Unix(2000, 0))})
			if err != nil {
				t.Fatal(err)
			}
			if got := pressureOf(t, c); len(got) != 0 {
				t.Errorf("pressure series served without PSI: %v", got)
			}
		})
	}
}

func TestReadPSIMalformed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.pressure")
	write(t, p, "some avg10=x total=12 extra\nbogus total=99\nfull avg300=2.5 total=-3\n\n")
	got := readPSI(p)
	if got.Some.Total != 12 || got.Some.Avg10 != 0 || got.Full.Total != 0 || got.Full.Avg300 != 2.5 {
		t.Errorf("readPSI = %+v", got)
	}
	if z := readPSI(filepath.Join(t.TempDir(), "missing")); z != (psi.Stats{}) {
		t.Errorf("missing file: %+v, want zeros", z)
	}
}

// cgroup2Mount is where a cgroup v2 hierarchy with PSI is mounted: the
// unified root of a v2 machine, or a v1 machine's hybrid
// /sys/fs/cgroup/unified (which has the pressure files, though kubelet
// looks only at /sys/fs/cgroup).
func cgroup2Mount() (string, error) {
	mounts, err := readMountinfo("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, m := range mounts {
		if m.fsType == "cgroup2" && psiEnabled(m.mountpoint) {
			return m.mountpoint, nil
		}
	}
	return "", errors.New("no cgroup2 mount with cpu.pressure in /proc/self/mountinfo")
}

// The pressure series of a real cgroup v2 cgroup whose processes contend
// for the CPUs: the kernel's own totals, read before and after the scrape
// by a parser of the test's, bound what is served.
func TestPressureSeriesRealCgroup(t *testing.T) {
	itest.Short(t, "a cgroup v2 cgroup with CPU-bound processes")
	mnt, err := cgroup2Mount()
	if err == nil && os.Geteuid() != 0 {
		err = errors.New("not root: cannot create a cgroup")
	}
	itest.Require(t, "a cgroup v2 hierarchy with PSI (root)", err)
	name := fmt.Sprintf("/nodekit-psi-test-%d", os.Getpid())
	d := filepath.Join(mnt, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroup(t, d) })
	for range runtime.NumCPU() + 1 {
		busy(t, d)
	}
	time.Sleep(1500 * time.Millisecond)
	before := kernelSomeTotal(t, filepath.Join(d, "cpu.pressure"))
	dir := t.TempDir()
	fakeMachine(t, dir, filepath.Join(dir, "proc"))
	c, err := New(Config{Roots: []string{name}, CgroupRoot: mnt, ProcDir: filepath.Join(dir, "proc"), RootDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	got := pressureOf(t, c)
	after := kernelSomeTotal(t, filepath.Join(d, "cpu.pressure"))
	k := `container_pressure_cpu_waiting_seconds_total{container="",id="` + name + `",image="",name="",namespace="",pod=""}`
	v, ok := got[k]
	if !ok {
		t.Fatalf("%s not served; pressure series: %v", k, got)
	}
	if before == 0 {
		t.Fatalf("the kernel reports no CPU pressure for %d busy processes on %d CPUs", runtime.NumCPU()+1, runtime.NumCPU())
	}
	if v < float64(before)/1e6 || v > float64(after)/1e6 {
		t.Errorf("%s = %v, want within the kernel's %v..%v", k, v, float64(before)/1e6, float64(after)/1e6)
	}
	if _, ok := got[strings.Replace(k, "cpu_waiting", "io_stalled", 1)]; !ok {
		t.Errorf("io pressure of %s not served", name)
	}
}

// busy starts a CPU-bound shell loop in cgroup d; it is killed at cleanup.
func busy(t *testing.T, d string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// removeCgroup removes d once the processes killed before it are gone.
func removeCgroup(t *testing.T, d string) {
	var err error
	for range 50 {
		if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("remove cgroup %s: %v", d, err)
}

// kernelSomeTotal reads the "some" line's total of a pressure file.
func kernelSomeTotal(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var a10, a60, a300 float64
	var total uint64
	if _, err := fmt.Sscanf(string(b), "some avg10=%f avg60=%f avg300=%f total=%d", &a10, &a60, &a300, &total); err != nil {
		t.Fatalf("%s: %q: %v", path, b, err)
	}
	return total
}
