package server

import (
	"crypto/tls"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/utils/clock"
)

// NodeStartupGauges are upstream's kubelet_node_startup_* gauges: how long
// the node took to boot, register and become Ready. Each phase is set
// once, from the first time it was reached; the methods are safe for
// concurrent use.
type NodeStartupGauges struct {
	PreAgent, PreRegistration, Registration, PostRegistration, Total prometheus.Gauge

	mu                               sync.Mutex
	boot, start, attempt, registered time.Time
	readyDone                        bool
}

func newNodeStartupGauges() *NodeStartupGauges {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "kubelet_" + name, Help: alpha(help)})
	}
	return &NodeStartupGauges{
		PreAgent:         g("node_startup_pre_kubelet_duration_seconds", "Duration in seconds of node startup before kubelet starts."),
		PreRegistration:  g("node_startup_pre_registration_duration_seconds", "Duration in seconds of node startup before registration."),
		Registration:     g("node_startup_registration_duration_seconds", "Duration in seconds of node startup during registration."),
		PostRegistration: g("node_startup_post_registration_duration_seconds", "Duration in seconds of node startup after registration."),
		Total:            g("node_startup_duration_seconds", "Duration in seconds of node startup in total."),
	}
}

func (g *NodeStartupGauges) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.PreAgent, g.PreRegistration, g.Registration, g.PostRegistration, g.Total}
}

// AgentStarted records the machine's boot time and the agent's start
// (kubelet_node_startup_pre_kubelet_duration_seconds). A zero boot time
// (unknown) leaves the pre-agent and total gauges unset.
func (m *AgentMetrics) AgentStarted(boot, start time.Time) {
	g := m.NodeStartup
	g.mu.Lock()
	defer g.mu.Unlock()
	g.boot, g.start = boot, start
	if !boot.IsZero() {
		g.PreAgent.Set(start.Sub(boot).Seconds())
	}
}

// RegistrationAttempted records the first attempt to register the Node.
func (m *AgentMetrics) RegistrationAttempted(t time.Time) {
	g := m.NodeStartup
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.attempt.IsZero() {
		g.attempt = t
	}
}

// NodeRegistered records that the agent created its Node object at t
// (only a new Node counts, as upstream: a restart that finds its Node
// records no registration phases).
func (m *AgentMetrics) NodeRegistered(t time.Time) {
	g := m.NodeStartup
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.registered.IsZero() || g.attempt.IsZero() {
		return
	}
	g.registered = t
	g.PreRegistration.Set(g.attempt.Sub(g.start).Seconds())
	g.Registration.Set(t.Sub(g.attempt).Seconds())
}

// NodeReady records the Node's first Ready condition at t.
func (m *AgentMetrics) NodeReady(t time.Time) {
	g := m.NodeStartup
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.readyDone || g.registered.IsZero() {
		return
	}
	g.readyDone = true
	g.PostRegistration.Set(t.Sub(g.registered).Seconds())
	if !g.boot.IsZero() {
		g.Total.Set(t.Sub(g.boot).Seconds())
	}
}

// RegisterBuildInfo registers kubernetes_build_info (constant 1, labelled
// with info, e.g. k8s.io/component-base/version.Get()) in reg, as every
// Kubernetes component serves it.
func RegisterBuildInfo(reg prometheus.Registerer, info version.Info) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubernetes_build_info",
		Help: beta("A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running."),
	}, []string{"major", "minor", "git_version", "git_commit", "git_tree_state", "build_date", "go_version", "compiler", "platform"})
	if info.GoVersion == "" {
		info.GoVersion, info.Compiler, info.Platform = runtime.Version(), runtime.Compiler, runtime.GOOS+"/"+runtime.GOARCH
	}
	g.WithLabelValues(info.Major, info.Minor, info.GitVersion, info.GitCommit, info.GitTreeState, info.BuildDate,
		info.GoVersion, info.Compiler, info.Platform).Set(1)
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("server: register kubernetes_build_info: %w", err)
	}
	return nil
}

// RegisterProcessMetrics registers the Go runtime (go_*) and process
// (process_*) collectors in reg, as upstream components' registries carry.
func RegisterProcessMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("server: register Go and process metrics: %w", err)
		}
	}
	return nil
}

// RegisterClientCertificateTTL registers
// kubelet_certificate_manager_client_ttl_seconds in reg: the seconds until
// the client certificate current returns expires, read at each scrape (+Inf
// with no valid certificate). Upstream registers it when client
// certificate rotation is on.
func RegisterClientCertificateTTL(reg prometheus.Registerer, current func() *tls.Certificate, clk clock.PassiveClock) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kubelet_certificate_manager_client_ttl_seconds",
		Help: alpha("Gauge of the TTL (time-to-live) of the Kubelet's client certificate. " +
			"The value is in seconds until certificate expiry (negative if already expired). " +
			"If client certificate is invalid or unused, the value will be +INF."),
	}, func() float64 {
		if c := current(); c != nil && c.Leaf != nil {
			return math.Trunc(c.Leaf.NotAfter.Sub(clk.Now()).Seconds())
		}
		return math.Inf(1)
	})
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("server: register kubelet_certificate_manager_client_ttl_seconds: %w", err)
	}
	return nil
}
