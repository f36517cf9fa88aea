package containermetrics

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

type podsFunc func(ctx context.Context, all bool) ([]*nodekit.Pod, error)

func (f podsFunc) ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error) { return f(ctx, all) }

var _ PodLister = podsFunc(nil)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeCgroupV1 writes a cgroup v1 cgroup with the given CPU time, memory
// usage and inactive file pages, and quota (-1: none).
func fakeCgroupV1(t *testing.T, root, name string, cpuNS, usage, inactive uint64, quota int64) {
	t.Helper()
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	write(t, filepath.Join(root, "cpu", name, "cpu.shares"), "102\n")
	write(t, filepath.Join(root, "cpu", name, "cpu.cfs_period_us"), "100000\n")
	write(t, filepath.Join(root, "cpu", name, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)+"\n")
	write(t, filepath.Join(root, "cpu", name, "cpu.stat"), "nr_periods 10\nnr_throttled 3\nthrottled_time 5000000\n")
	write(t, filepath.Join(root, "cpu", name, "cgroup.procs"), "")
	write(t, filepath.Join(root, "cpuacct", name, "cpuacct.usage"), u(cpuNS)+"\n")
	write(t, filepath.Join(root, "cpuacct", name, "cpuacct.stat"), "user 10\nsystem 5\n")
	write(t, filepath.Join(root, "memory", name, "memory.usage_in_bytes"), u(usage)+"\n")
	write(t, filepath.Join(root, "memory", name, "memory.limit_in_bytes"), "9223372036854771712\n")
	write(t, filepath.Join(root, "memory", name, "memory.use_hierarchy"), "1\n")
	write(t, filepath.Join(root, "memory", name, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
	write(t, filepath.Join(root, "memory", name, "memory.stat"),
		"cache 1\nrss 2\ntotal_cache 4096\ntotal_rss 8192\ntotal_inactive_file "+u(inactive)+"\ntotal_mapped_file 0\n")
}

func TestCollectorSeries(t *testing.T) {
	dir := t.TempDir()
	cg, proc := filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc")
	write(t, filepath.Join(proc, "cpuinfo"), "processor\t: 0\ncore id\t: 0\nphysical id\t: 0\nprocessor\t: 1\ncore id\t: 1\nphysical id\t: 0\n")
	write(t, filepath.Join(proc, "meminfo"), "MemTotal:       1000 kB\nSwapTotal: 0 kB\n")
	write(t, filepath.Join(proc, "stat"), "cpu 1 2 3\nbtime 100\n")
	write(t, filepath.Join(dir, "etc/machine-id"), "mid\n")
	const uid, sandbox, app = "1234-5678", "aaaa", "bbbb"
	fakeCgroupV1(t, cg, "/", 9e9, 5000, 1000, -1)
	fakeCgroupV1(t, cg, "/kubepods", 8e9, 4000, 1000, -1)
	fakeCgroupV1(t, cg, "/kubepods/besteffort", 7e9, 3000, 1000, -1)
	fakeCgroupV1(t, cg, "/kubepods/besteffort/pod"+uid, 6e9, 2000, 500, 50000)
	fakeCgroupV1(t, cg, "/kubepods/besteffort/pod"+uid+"/"+sandbox, 1e7, 100, 0, -1)
	fakeCgroupV1(t, cg, "/kubepods/besteffort/pod"+uid+"/"+app, 5e9, 1900, 400, 50000)
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
	podCg := "/kubepods/besteffort/pod" + uid
	want := map[string]float64{
		`container_cpu_usage_seconds_total{container="app",cpu="total",id="` + podCg + `/bbbb",image="docker.io/library/busybox:latest",name="bbbb",namespace="ns",pod="web"}`: 5,
		`container_memory_working_set_bytes{container="app",id="` + podCg + `/bbbb",image="docker.io/library/busybox:latest",name="bbbb",namespace="ns",pod="web"}`:            1500,
		`container_memory_rss{container="app",id="` + podCg + `/bbbb",image="docker.io/library/busybox:latest",name="bbbb",namespace="ns",pod="web"}`:                          8192,
		`container_spec_cpu_quota{container="app",id="` + podCg + `/bbbb",image="docker.io/library/busybox:latest",name="bbbb",namespace="ns",pod="web"}`:                      50000,
		`container_cpu_cfs_throttled_periods_total{container="app",id="` + podCg + `/bbbb",image="docker.io/library/busybox:latest",name="bbbb",namespace="ns",pod="web"}`:     3,
		`container_spec_memory_limit_bytes{container="app",id="` + podCg + `/bbbb",image="docker.io/library/busybox:latest",name="bbbb",namespace="ns",pod="web"}`:             0,
		`container_oom_events_total{container="app",id="` + podCg + `/bbbb",image="docker.io/library/busybox:latest",name="bbbb",namespace="ns",pod="web"}`:                    2,
		`container_memory_events_max_total{container="app",id="` + podCg + `/bbbb",image="docker.io/library/busybox:latest",name="bbbb",namespace="ns",pod="web"}`:             0,
		// The sandbox: container="", the pause image, the sandbox's ID as name.
		`container_cpu_usage_seconds_total{container="",cpu="total",id="` + podCg + `/aaaa",image="registry.k8s.io/pause:3.10.1",name="aaaa",namespace="ns",pod="web"}`: 0.01,
		// The pod cgroup: pod and namespace only.
		`container_memory_working_set_bytes{container="",id="` + podCg + `",image="",name="",namespace="",pod="web"}`:     -1, // replaced below
		`container_memory_working_set_bytes{container="",id="/kubepods/besteffort",image="",name="",namespace="",pod=""}`: 2000,
		`container_memory_working_set_bytes{container="",id="/",image="",name="",namespace="",pod=""}`:                    4000,
		`container_last_seen{container="",id="/kubepods",image="",name="",namespace="",pod=""}`:                           2000,
		`machine_cpu_cores{boot_id="",machine_id="mid",system_uuid="mid"}`:                                                2,
		`machine_memory_bytes{boot_id="",machine_id="mid",system_uuid="mid"}`:                                             1024000,
	}
	delete(want, `container_memory_working_set_bytes{container="",id="`+podCg+`",image="",name="",namespace="",pod="web"}`)
	want[`container_memory_working_set_bytes{container="",id="`+podCg+`",image="",name="",namespace="ns",pod="web"}`] = 1500
	for k, v := range want {
		g, ok := got[k]
		if !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	// No quota: no CFS series, as cadvisor.
	for k := range got {
		if strings.HasPrefix(k, "container_cpu_cfs_periods_total") && strings.Contains(k, `id="/kubepods"`) {
			t.Errorf("unexpected %s: /kubepods has no quota", k)
		}
	}
	if t.Failed() {
		for k, v := range got {
			t.Logf("%s %v", k, v)
		}
	}
}

func labelString(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+`="`+l.GetValue()+`"`)
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

var _ prometheus.Collector = scrape{}
