package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/cgroupmgr"
	"github.com/nodekit/nodekit/containermetrics"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/server"
	"github.com/nodekit/nodekit/stats"
)

// The runtime finds the image volume counters on the metrics it is given.
var _ criruntime.ImageVolumeMetrics = (*agentMetrics)(nil)

// agentMetrics are the registries the node API serves and the metrics the
// parts report into: built first, so the runtime, the PLEG, the probes,
// the loop and eviction are handed them when they are built.
type agentMetrics struct {
	*server.AgentMetrics // /metrics: the kubelet_* metrics
	probes               *server.ProbeMetrics
	reg, probeReg        *prometheus.Registry
}

// restClientHook is client-go's request-metrics hook, which client-go keeps
// process-wide: registered once, on first use, and pointed at the registry
// of the agent that started last (tests run several agents in one process).
var restClientHook = sync.OnceValue(func() *server.RESTClientHook {
	h := &server.RESTClientHook{}
	clientmetrics.Register(h.Opts())
	return h
})

// newAgentMetrics registers upstream kubelet's metrics, kubernetes_build_info
// and the Go and process collectors, and records the node's name and how
// long after boot the agent started.
func newAgentMetrics(nodeName string, started time.Time) (*agentMetrics, error) {
	m := &agentMetrics{reg: prometheus.NewRegistry(), probeReg: prometheus.NewRegistry()}
	var err error
	if m.AgentMetrics, err = server.RegisterAgentMetrics(m.reg); err != nil {
		return nil, err
	}
	if m.probes, err = server.RegisterProbeMetrics(m.probeReg); err != nil {
		return nil, err
	}
	if err := server.RegisterBuildInfo(m.reg, version.Get()); err != nil {
		return nil, err
	}
	if err := server.RegisterProcessMetrics(m.reg); err != nil {
		return nil, err
	}
	rest, err := server.RegisterRESTClientMetrics(m.reg)
	if err != nil {
		return nil, err
	}
	restClientHook().Attach(rest)
	m.SetNodeName(nodeName)
	var boot time.Time
	if bt, err := (stats.Machine{}).BootTime(); err == nil {
		boot = time.Unix(bt, 0)
	}
	m.AgentStarted(boot, started)
	return m, nil
}

// watchCertificate adds the client certificate's TTL and renewal errors
// when the agent rotates it (as upstream, only then).
func (a *agent) watchCertificate() error {
	if a.certRotator == nil {
		return nil
	}
	if err := server.RegisterClientCertificateTTL(a.metrics.reg, a.certRotator.Current, clock.RealClock{}); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := a.certRotator.RegisterMetrics(a.metrics.reg); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// containerMetrics builds /metrics/cadvisor: the root cgroup and the
// kubepods tree, as kubelet hands cadvisor its node-allocatable root
// (kubeletCgroups and systemCgroups, its other roots, are refused at
// start), named by the runtime's pods.
func (a *agent) containerMetrics(ctx context.Context) (*containermetrics.Collector, error) {
	cfg := a.cfg
	root := cgroupmgr.ParseCgroupfs(cfg.CgroupRoot)
	if *cfg.CgroupsPerQOS {
		root = append(root, "kubepods")
	}
	name := root.ToCgroupfs()
	if cfg.CgroupDriver == cgroupmgr.DriverSystemd {
		name = root.ToSystemd()
	}
	pause, err := a.runtime.SandboxImage(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Unable to read the runtime's sandbox image; /metrics/cadvisor serves sandboxes with image=\"\"")
	}
	c, err := containermetrics.New(containermetrics.Config{Roots: []string{name}, Pods: a.runtime, Images: a.runtime, SandboxImage: pause})
	if err != nil {
		return nil, fmt.Errorf("/metrics/cadvisor: %w", err)
	}
	return c, nil
}
