package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	clocktesting "k8s.io/utils/clock/testing"
)

func newAgentMetrics(t *testing.T) (*AgentMetrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := RegisterAgentMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// histogram returns the sample count and sum of a histogram.
func histogram(t *testing.T, o prometheus.Observer) (uint64, float64) {
	t.Helper()
	var pb dto.Metric
	if err := o.(prometheus.Metric).Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetHistogram().GetSampleCount(), pb.GetHistogram().GetSampleSum()
}

func TestRuntimeOperationMetrics(t *testing.T) {
	m, _ := newAgentMetrics(t)
	m.ObserveRuntimeOperation("create_container", 20*time.Millisecond, nil)
	m.ObserveRuntimeOperation("create_container", 30*time.Millisecond, errors.New("boom"))
	m.ObserveRuntimeOperation("list_containers", time.Millisecond, nil)
	if got := testutil.ToFloat64(m.RuntimeOperations.WithLabelValues("create_container")); got != 2 {
		t.Errorf("create_container operations = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.RuntimeOperationsErrors.WithLabelValues("create_container")); got != 1 {
		t.Errorf("create_container errors = %v, want 1", got)
	}
	if n, sum := histogram(t, m.RuntimeOperationsDuration.WithLabelValues("create_container")); n != 2 || sum < 0.049 || sum > 0.051 {
		t.Errorf("create_container duration: %d observations summing %v, want 2 summing 0.05", n, sum)
	}
}

func TestStartedPodAndContainerMetrics(t *testing.T) {
	m, _ := newAgentMetrics(t)
	m.StartedPod(nil)
	m.StartedPod(errors.New("no network"))
	m.StartedContainer("container", "")
	m.StartedContainer("init_container", "")
	m.StartedContainer("container", "CreateContainerError")
	if got := testutil.ToFloat64(m.StartedPods); got != 2 {
		t.Errorf("started pods = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.StartedPodsErrors); got != 1 {
		t.Errorf("started pod errors = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.StartedContainers.WithLabelValues("container")); got != 2 {
		t.Errorf("started containers = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.StartedContainersErrors.WithLabelValues("container", "CreateContainerError")); got != 1 {
		t.Errorf("started container errors = %v, want 1", got)
	}
}

// The SLI leaves out the time between the pod's first pull starting and
// its last one finishing; pod start duration counts from first seen.
func TestPodStartMetrics(t *testing.T) {
	m, _ := newAgentMetrics(t)
	created := time.Unix(1000, 0)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", CreationTimestamp: metav1.NewTime(created)}}
	m.ObserveImagePull("u1", 50<<20, created.Add(2*time.Second), created.Add(5*time.Second))
	m.ObserveImagePull("u1", 0, created.Add(3*time.Second), created.Add(8*time.Second))
	m.ObservePodStarted(pod, created.Add(time.Second), created.Add(10*time.Second))

	if n, sum := histogram(t, m.PodStartDuration); n != 1 || sum != 9 {
		t.Errorf("pod start duration: %d observations summing %v, want 1 of 9s", n, sum)
	}
	if n, sum := histogram(t, m.PodStartSLIDuration.WithLabelValues()); n != 1 || sum != 4 {
		t.Errorf("pod start SLI: %d observations summing %v, want 1 of 10s - 6s pulling = 4s", n, sum)
	}
	if n, _ := histogram(t, m.ImagePullDuration.WithLabelValues("10MB-100MB")); n != 1 {
		t.Errorf("image pulls of 10MB-100MB = %d, want 1", n)
	}
	if n, _ := histogram(t, m.ImagePullDuration.WithLabelValues("N/A")); n != 1 {
		t.Errorf("image pulls of unknown size = %d, want 1", n)
	}
	// The pull record went with the observation: a later start (a
	// restarted agent would not send one, a test may) pulls nothing.
	m.ObservePodStarted(pod, time.Time{}, created.Add(20*time.Second))
	if n, sum := histogram(t, m.PodStartSLIDuration.WithLabelValues()); n != 2 || sum != 24 {
		t.Errorf("pod start SLI after a second start: %d summing %v, want 2 summing 24", n, sum)
	}
	if n, _ := histogram(t, m.PodStartDuration); n != 1 {
		t.Errorf("a start without first-seen time was observed: %d", n)
	}
	m.ObserveImagePull("u2", 1, created, created.Add(time.Second))
	m.ForgetPod("u2")
	if len(m.pulls.pods) != 0 {
		t.Errorf("pull records left: %v", m.pulls.pods)
	}
}

func TestImageSizeBucket(t *testing.T) {
	for size, want := range map[uint64]string{
		0: "N/A", 1: "0-10MB", 10 << 20: "0-10MB", 10<<20 + 1: "10MB-100MB", 700 << 20: "500MB-1GB",
		3 << 30: "1GB-5GB", 200 << 30: "GT100GB",
	} {
		if got := ImageSizeBucket(size); got != want {
			t.Errorf("ImageSizeBucket(%d) = %q, want %q", size, got, want)
		}
	}
}

func TestNodeMetrics(t *testing.T) {
	m, _ := newAgentMetrics(t)
	m.SetNodeName("node-1")
	if got := testutil.ToFloat64(m.NodeName.WithLabelValues("node-1")); got != 1 {
		t.Errorf("kubelet_node_name{node=node-1} = %v", got)
	}
	boot := time.Unix(1000, 0)
	m.AgentStarted(boot, boot.Add(10*time.Second))
	m.NodeReady(boot.Add(11 * time.Second)) // before registration: ignored
	m.RegistrationAttempted(boot.Add(12 * time.Second))
	m.RegistrationAttempted(boot.Add(13 * time.Second)) // not the first
	m.NodeRegistered(boot.Add(15 * time.Second))
	m.NodeReady(boot.Add(20 * time.Second))
	m.NodeReady(boot.Add(30 * time.Second)) // not the first
	g := m.NodeStartup
	for name, c := range map[string]struct {
		g    prometheus.Gauge
		want float64
	}{
		"pre_kubelet": {g.PreAgent, 10}, "pre_registration": {g.PreRegistration, 2}, "registration": {g.Registration, 3},
		"post_registration": {g.PostRegistration, 5}, "total": {g.Total, 20},
	} {
		if got := testutil.ToFloat64(c.g); got != c.want {
			t.Errorf("node startup %s = %v, want %v", name, got, c.want)
		}
	}
}

func TestBuildInfoAndProcessMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := RegisterBuildInfo(reg, version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"}); err != nil {
		t.Fatal(err)
	}
	if err := RegisterProcessMetrics(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		names[mf.GetName()] = mf
	}
	bi := names["kubernetes_build_info"]
	if bi == nil || !strings.HasPrefix(bi.GetHelp(), "[BETA] ") {
		t.Fatalf("kubernetes_build_info missing or without upstream help: %v", bi)
	}
	labels := map[string]string{}
	for _, l := range bi.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["git_version"] != "v1.37.2" || labels["minor"] != "37" || labels["go_version"] == "" || labels["platform"] == "" {
		t.Errorf("kubernetes_build_info labels = %v", labels)
	}
	for _, want := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if names[want] == nil {
			t.Errorf("%s not gathered", want)
		}
	}
}

// The help texts carry upstream's stability prefix, so a scrape reads as
// kubelet's.
func TestAgentMetricsHelp(t *testing.T) {
	m, reg := newAgentMetrics(t)
	m.SetRunning(0, nil)
	m.SetNodeName("n")
	m.ObservePodWorker("sync", time.Second)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) == 0 {
		t.Fatal("nothing gathered")
	}
	// Upstream's image volume counters are BETA, the rest ALPHA.
	beta := map[string]bool{MetricImageVolumeRequested: true, MetricImageVolumeMounted: true, MetricImageVolumeMountErrors: true}
	for _, mf := range mfs {
		want := "[ALPHA] "
		if beta[mf.GetName()] {
			want = "[BETA] "
		}
		if !strings.HasPrefix(mf.GetHelp(), want) {
			t.Errorf("%s help %q lacks %s", mf.GetName(), mf.GetHelp(), want)
		}
	}
}

func TestForgetProbe(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm, err := RegisterProbeMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	pm.ObserveProbe("Readiness", "successful", "default", "web", "uid-1", "app", time.Millisecond)
	pm.ObserveProbe("Readiness", "failed", "default", "web", "uid-1", "app", time.Second)
	if n, _ := histogram(t, pm.ProbeDuration.WithLabelValues("Readiness", "app", "web", "default")); n != 1 {
		t.Errorf("probe durations observed = %d, want 1 (failures are not timed)", n)
	}
	pm.ForgetProbe("Readiness", "default", "web", "uid-1", "app")
	if n := testutil.CollectAndCount(pm.ProbeTotal); n != 0 {
		t.Errorf("%d probe series left after ForgetProbe", n)
	}
}

func TestClientCertificateTTL(t *testing.T) {
	reg := prometheus.NewRegistry()
	now := time.Unix(1000, 0)
	var cert *tls.Certificate
	if err := RegisterClientCertificateTTL(reg, func() *tls.Certificate { return cert }, clocktesting.NewFakePassiveClock(now)); err != nil {
		t.Fatal(err)
	}
	value := func() float64 {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 {
			t.Fatalf("gather: %v %v", mfs, err)
		}
		return mfs[0].GetMetric()[0].GetGauge().GetValue()
	}
	if v := value(); !math.IsInf(v, 1) {
		t.Errorf("TTL without a certificate = %v, want +Inf", v)
	}
	cert = &tls.Certificate{Leaf: &x509.Certificate{NotAfter: now.Add(90*time.Minute + 500*time.Millisecond)}}
	if v := value(); v != 5400 {
		t.Errorf("TTL = %v, want 5400", v)
	}
}

func TestPLEGLastSeen(t *testing.T) {
	m, _ := newAgentMetrics(t)
	m.SetPLEGLastSeen(time.Unix(1234, 500))
	if got := testutil.ToFloat64(m.PLEGLastSeen); got != 1234 {
		t.Errorf("kubelet_pleg_last_seen_seconds = %v, want 1234", got)
	}
}

func TestImageVolumeMetrics(t *testing.T) {
	m, _ := newAgentMetrics(t)
	m.ImageVolumeMounts(1, 2, 0)
	m.ImageVolumeMounts(2, 0, 3)
	for name, tc := range map[string]struct {
		c    prometheus.Counter
		want float64
	}{
		"requested": {m.ImageVolumeRequested, 3}, "succeeded": {m.ImageVolumeMounted, 2}, "failed": {m.ImageVolumeMountErrors, 3},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%s = %v, want %v", name, got, tc.want)
		}
	}
}
