package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// scrape reads a metrics page of the node API through the API server
// (nodes/NAME/proxy/PATH, as Prometheus' kubelet job does) into series
// "name{labels}" -> value; labels are as served (sorted by name).
func (e *env) scrape(ctx context.Context, path ...string) (map[string]float64, error) {
	b, err := e.client.CoreV1().RESTClient().Get().AbsPath(append([]string{"/api/v1/nodes", testNode, "proxy"}, path...)...).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("unreadable line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, nil
}

// TestMetricsMove starts pods on the agent and checks, through the API
// server's proxy, that the kubelet metrics dashboards and alerts read have
// moved with them.
func TestMetricsMove(t *testing.T) {
	e := startEnv(t)
	ctx := t.Context()
	withInit := simplePod("with-init", v1.RestartPolicyAlways, "sleep 3600")
	withInit.Spec.InitContainers = []v1.Container{{Name: "init", Command: []string{"true"}}}
	notReady := simplePod("not-ready", v1.RestartPolicyAlways, "sleep 3600")
	notReady.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"false"}}}, PeriodSeconds: 1,
	}
	pods := []*v1.Pod{simplePod("plain", v1.RestartPolicyAlways, "sleep 3600"), withInit, notReady}
	for _, p := range pods {
		e.createPod(t, p)
	}
	for _, p := range pods {
		e.waitPod(t, p.Name, 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	}

	// The PLEG counts running pods and containers on its next periodic
	// relist (every second); a pod can be Running before it (the
	// on-demand relist), so wait for both counts.
	var m map[string]float64
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		m, last = e.scrape(ctx, "metrics")
		return last == nil && m["kubelet_running_pods"] == float64(len(pods)) &&
			m[`kubelet_running_containers{container_state="running"}`] >= float64(len(pods)), nil
	})
	if err != nil {
		t.Fatalf("kubelet_running_pods = %v, want %d (last error %v)", m["kubelet_running_pods"], len(pods), last)
	}
	apiHost := strings.TrimPrefix(e.admin.Host, "https://")
	atLeast := map[string]float64{
		`kubelet_running_containers{container_state="running"}`:                               float64(len(pods)),
		"kubelet_pod_start_duration_seconds_count":                                            float64(len(pods)),
		"kubelet_pod_start_sli_duration_seconds_count":                                        float64(len(pods)),
		`kubelet_pod_worker_duration_seconds_count{operation_type="create"}`:                  float64(len(pods)),
		`kubelet_pod_worker_duration_seconds_count{operation_type="sync"}`:                    1,
		"kubelet_pleg_relist_duration_seconds_count":                                          1,
		"kubelet_pleg_relist_interval_seconds_count":                                          1,
		"kubelet_pleg_last_seen_seconds":                                                      float64(time.Now().Add(-time.Minute).Unix()),
		`kubelet_runtime_operations_total{operation_type="run_podsandbox"}`:                   float64(len(pods)),
		`kubelet_runtime_operations_total{operation_type="create_container"}`:                 float64(len(pods) + 1),
		`kubelet_runtime_operations_total{operation_type="list_containers"}`:                  1,
		`kubelet_runtime_operations_total{operation_type="exec_sync"}`:                        1,
		`kubelet_runtime_operations_duration_seconds_count{operation_type="start_container"}`: float64(len(pods) + 1),
		"kubelet_started_pods_total":                                                          float64(len(pods)),
		`kubelet_started_containers_total{container_type="container"}`:                        float64(len(pods)),
		`kubelet_started_containers_total{container_type="init_container"}`:                   1,
		`kubelet_node_name{node="` + testNode + `"}`:                                          1,
		"kubelet_node_startup_pre_kubelet_duration_seconds":                                   1,
		"kubelet_node_startup_duration_seconds":                                               1,
		// The agent's status patches (this test patches nothing).
		`rest_client_requests_total{code="200",host="` + apiHost + `",method="PATCH"}`:    float64(len(pods)),
		`rest_client_request_duration_seconds_count{host="` + apiHost + `",verb="PATCH"}`: float64(len(pods)),
		"go_goroutines":                 1,
		"process_resident_memory_bytes": 1,
	}
	for series, min := range atLeast {
		if v, ok := m[series]; !ok || v < min {
			t.Errorf("%s = %v (present %v), want at least %v", series, v, ok, min)
		}
	}
	if missing := missingFamilies(m, mixinSeries); len(missing) > 0 {
		t.Errorf("families the kubernetes-mixin reads are missing: %v", missing)
	}
	found := false
	for series := range m {
		if strings.HasPrefix(series, "kubernetes_build_info{") {
			found = true
		}
	}
	if !found {
		t.Error("kubernetes_build_info missing")
	}
	if t.Failed() {
		for s, v := range m {
			if strings.HasPrefix(s, "kubelet_") && !strings.Contains(s, "_bucket") {
				t.Logf("%s %v", s, v)
			}
		}
	}

	// The failing readiness probe is counted on /metrics/probes.
	failed := `prober_probe_total{container="app",namespace="default",pod="not-ready",pod_uid="` + podUID(t, e, "not-ready") + `",probe_type="Readiness",result="failed"}`
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		m, last = e.scrape(ctx, "metrics", "probes")
		return last == nil && m[failed] >= 2, nil
	})
	if err != nil {
		t.Fatalf("%s = %v, want at least 2 (last error %v)", failed, m[failed], last)
	}
}

func podUID(t *testing.T, e *env, name string) string {
	t.Helper()
	p, err := e.client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}
