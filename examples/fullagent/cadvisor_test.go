package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agenttest"
)

// scrapeStamped is scrape for pages whose samples carry timestamps
// ("name{labels} value timestamp", as /metrics/cadvisor serves them).
func (e *env) scrapeStamped(ctx context.Context, path ...string) (map[string]float64, error) {
	b, err := e.client.CoreV1().RESTClient().Get().AbsPath(append([]string{"/api/v1/nodes", testNode, "proxy"}, path...)...).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.LastIndexByte(line, '}') + 1
		if end == 0 {
			end = strings.IndexByte(line, ' ')
		}
		fields := strings.Fields(line[end:])
		if end <= 0 || len(fields) == 0 {
			return nil, fmt.Errorf("unreadable line %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		out[line[:end]] = v
	}
	return out, nil
}

// seriesWith returns the series of family name whose labels include
// every pair of want (label="value" strings), and their values.
func seriesWith(m map[string]float64, name string, want ...string) map[string]float64 {
	out := map[string]float64{}
	for s, v := range m {
		if !strings.HasPrefix(s, name+"{") {
			continue
		}
		ok := true
		for _, w := range want {
			if !strings.Contains(s, w) {
				ok = false
				break
			}
		}
		if ok {
			out[s] = v
		}
	}
	return out
}

// TestMetricsCadvisor scrapes /metrics/cadvisor through the API server's
// node proxy and checks the series dashboards read: CPU and memory for
// each container with kubelet's labels (container, pod, namespace,
// image, name = the container ID, id = its cgroup), the sandbox with
// container="" and the pause image, the pod cgroup with pod and
// namespace only, and a busy container's CPU counter rising.
func TestMetricsCadvisor(t *testing.T) {
	e := startEnv(t)
	ctx := t.Context()
	busy := simplePod("busy", v1.RestartPolicyAlways, "while true; do :; done")
	idle := simplePod("idle", v1.RestartPolicyAlways, "sleep 3600")
	idle.Spec.Containers[0].Resources = v1.ResourceRequirements{Limits: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("64Mi"),
	}}
	for _, p := range []*v1.Pod{busy, idle} {
		e.createPod(t, p)
	}
	ids := map[string]string{}
	for _, name := range []string{"busy", "idle"} {
		p := e.waitPod(t, name, 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		cs := containerStatus(p, "app")
		_, id, _ := strings.Cut(cs.ContainerID, "://")
		ids[name] = id
	}
	// The image label is the first tag of the image the container runs,
	// as containerd names it to cadvisor (the test images carry several).
	image := `image="`
	var m map[string]float64
	var last error
	cpuOf := func(pod string) map[string]float64 {
		return seriesWith(m, "container_cpu_usage_seconds_total", `container="app"`, `pod="`+pod+`"`, `namespace="default"`,
			image, `name="`+ids[pod]+`"`, `cpu="total"`, `/`+ids[pod]+`"`)
	}
	scrape := func(ctx context.Context) bool {
		got, err := e.scrapeStamped(ctx, "metrics", "cadvisor")
		if err != nil {
			last = err
			return false
		}
		m = got
		return true
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return scrape(ctx) && len(cpuOf("busy")) == 1 && len(cpuOf("idle")) == 1, nil
	})
	if err != nil {
		for s := range seriesWith(m, "container_cpu_usage_seconds_total") {
			t.Logf("%s", s)
		}
		t.Fatalf("no container_cpu_usage_seconds_total for both containers (last error %v): busy %v idle %v", last, cpuOf("busy"), cpuOf("idle"))
	}
	for s := range cpuOf("busy") {
		if strings.Contains(s, `image=""`) || strings.Contains(s, `image="sha256:`) || !strings.Contains(s, `busybox:`) {
			t.Errorf("%s: want a busybox tag as the image label", s)
		}
	}
	for _, pod := range []string{"busy", "idle"} {
		for _, fam := range []string{"container_memory_working_set_bytes", "container_memory_rss", "container_memory_usage_bytes",
			"container_memory_cache", "container_spec_memory_limit_bytes", "container_spec_cpu_shares", "container_spec_cpu_period",
			"container_start_time_seconds", "container_last_seen"} {
			if got := seriesWith(m, fam, `container="app"`, `pod="`+pod+`"`, `namespace="default"`, image, `name="`+ids[pod]+`"`); len(got) != 1 {
				t.Errorf("%s of pod %s: %v, want one series", fam, pod, got)
			}
		}
		// The sandbox: container="", the pause image, network series.
		if got := seriesWith(m, "container_memory_working_set_bytes", `container=""`, `pod="`+pod+`"`, `image="`+agenttest.PauseImage+`"`); len(got) != 1 {
			t.Errorf("sandbox of pod %s: %v, want one series", pod, got)
		}
		if got := seriesWith(m, "container_network_receive_bytes_total", `container=""`, `pod="`+pod+`"`, `interface="eth0"`); len(got) != 1 {
			t.Errorf("network of pod %s: %v, want one series", pod, got)
		}
		// The pod cgroup: pod and namespace, no image or name.
		if got := seriesWith(m, "container_cpu_usage_seconds_total", `container=""`, `image=""`, `name=""`, `pod="`+pod+`"`, `namespace="default"`); len(got) != 1 {
			t.Errorf("pod cgroup of pod %s: %v, want one series", pod, got)
		}
	}
	// The idle container's limits as the spec series show them.
	limits := map[string]float64{"container_spec_memory_limit_bytes": 64 << 20, "container_spec_cpu_quota": 20000}
	for fam, want := range limits {
		for s, v := range seriesWith(m, fam, `container="app"`, `pod="idle"`) {
			if v != want {
				t.Errorf("%s = %v, want %v", s, v, want)
			}
		}
	}
	if got := seriesWith(m, "container_cpu_cfs_periods_total", `container="app"`, `pod="idle"`); len(got) != 1 {
		t.Errorf("container_cpu_cfs_periods_total of the limited container: %v, want one series", got)
	}
	for _, fam := range []string{"machine_cpu_cores", "machine_memory_bytes"} {
		if got := seriesWith(m, fam); len(got) != 1 {
			t.Errorf("%s: %v, want one series", fam, got)
		}
	}
	if got := seriesWith(m, "container_memory_working_set_bytes", `id="/"`); len(got) != 1 {
		t.Errorf("root cgroup: %v, want one series", got)
	}

	// The busy container's CPU time rises between scrapes.
	var first float64
	for _, v := range cpuOf("busy") {
		first = v
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, false, func(ctx context.Context) (bool, error) {
		if !scrape(ctx) {
			return false, nil
		}
		for _, v := range cpuOf("busy") {
			return v >= first+0.5, nil
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("busy container's CPU did not rise by 0.5s from %v: %v (last error %v)", first, cpuOf("busy"), last)
	}
	t.Run("endpoints", func(t *testing.T) { checkEndpoints(t, e) })
	t.Run("resource", func(t *testing.T) { checkResourceMetrics(t, e, "busy", "idle") })
	if t.Failed() {
		for s, v := range m {
			if strings.Contains(s, `pod="idle"`) || strings.Contains(s, `pod="busy"`) {
				t.Logf("%s %v", s, v)
			}
		}
	}
}

// checkResourceMetrics reads /metrics/resource (what metrics-server and
// `kubectl top` read) through the API server's node proxy: the node's CPU
// and memory, each pod's and its app container's, the busy pod's CPU above
// zero, and no scrape error.
func checkResourceMetrics(t *testing.T, e *env, busy string, pods ...string) {
	m, err := e.scrapeStamped(t.Context(), "metrics", "resource")
	if err != nil {
		t.Fatalf("/metrics/resource: %v", err)
	}
	for _, fam := range []string{"node_cpu_usage_seconds_total", "node_memory_working_set_bytes"} {
		if v, ok := m[fam]; !ok || v <= 0 {
			t.Errorf("%s: %v (served: %v), want a positive value", fam, v, ok)
		}
	}
	if v, ok := m["resource_scrape_error"]; !ok || v != 0 {
		t.Errorf("resource_scrape_error: %v (served: %v), want 0", v, ok)
	}
	for _, pod := range append([]string{busy}, pods...) {
		for _, fam := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_start_time_seconds"} {
			if got := seriesWith(m, fam, `container="app"`, `namespace="default"`, `pod="`+pod+`"`); len(got) != 1 {
				t.Errorf("%s of pod %s: %v, want one series", fam, pod, got)
			}
		}
		for _, fam := range []string{"pod_cpu_usage_seconds_total", "pod_memory_working_set_bytes"} {
			if got := seriesWith(m, fam, `namespace="default"`, `pod="`+pod+`"`); len(got) != 1 {
				t.Errorf("%s of pod %s: %v, want one series", fam, pod, got)
			}
		}
	}
	for s, v := range seriesWith(m, "container_cpu_usage_seconds_total", `pod="`+busy+`"`) {
		if v <= 0 {
			t.Errorf("%s = %v, want the busy container's CPU above zero", s, v)
		}
	}
}

// checkEndpoints reads /metrics/slis, /statusz and /flagz through the API
// server's node proxy.
func checkEndpoints(t *testing.T, e *env) {
	ctx := t.Context()
	get := func(path string) string {
		b, err := e.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", testNode, "proxy", path).
			SetHeader("Accept", "text/plain").DoRaw(ctx)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return string(b)
	}
	// /statusz is authorized as nodes/statusz, which system:kubelet-api-admin
	// does not grant (as upstream): grant it to the API server's client.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "statusz-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/statusz"}, Verbs: []string{"get"}}}}
	if _, err := e.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "statusz-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "statusz-reader"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "kube-apiserver-kubelet-client"}}}
	if _, err := e.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	get("healthz") // records the checks
	slis := get("metrics/slis")
	for _, want := range []string{`kubernetes_healthcheck{name="syncloop",type="healthz"} 1`, `kubernetes_healthchecks_total{name="pleg",status="success",type="healthz"}`} {
		if !strings.Contains(slis, want) {
			t.Errorf("/metrics/slis lacks %q:\n%s", want, slis)
		}
	}
	// RBAC reaches the API server's authorizer through its informer; a
	// denial before that is cached by the agent (cacheUnauthorizedTTL).
	var statusz string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := e.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", testNode, "proxy", "statusz").
			SetHeader("Accept", "text/plain").DoRaw(ctx)
		statusz = string(b)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("/statusz: %v: %s", err, statusz)
	}
	for _, want := range []string{"kubelet statusz", "Binary version", "/metrics", "/statusz"} {
		if !strings.Contains(statusz, want) {
			t.Errorf("/statusz lacks %q:\n%s", want, statusz)
		}
	}
	flagz := get("flagz")
	for _, want := range []string{"kubelet flagz", "hostname-override", testNode} {
		if !strings.Contains(flagz, want) {
			t.Errorf("/flagz lacks %q:\n%s", want, flagz)
		}
	}
}
