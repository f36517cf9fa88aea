package kubeletconf

import (
	"fmt"
	"strings"
)

// Node is what differs between the agents a harness runs.
type Node struct {
	PodLogsDir      string // podLogsDir
	RuntimeEndpoint string // containerRuntimeEndpoint, e.g. unix:///.../containerd.sock
	Address         string // address: the node API listens here only
	CgroupRoot      string // cgroupRoot (a root of the caller's own); "" for none
	ClientCAFile    string // authentication.x509.clientCAFile
	// HealthzAddress is healthzBindAddress; "" leaves the default
	// 127.0.0.1, where another agent on the machine may listen.
	HealthzAddress string
	// Extra is appended as it is: further KubeletConfiguration lines, each
	// ending in a newline.
	Extra string
}

// Common is the KubeletConfiguration both agents get: cgroupfs, the given
// runtime, logs and listen address, x509 and webhook authentication, webhook
// authorization.
func Common(n Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
podLogsDir: %s
containerRuntimeEndpoint: %s
cgroupDriver: cgroupfs
clusterDomain: cluster.local
address: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization:
  mode: Webhook
`, n.PodLogsDir, n.RuntimeEndpoint, n.Address, n.ClientCAFile)
	if n.HealthzAddress != "" {
		fmt.Fprintf(&b, "healthzBindAddress: %s\n", n.HealthzAddress)
	}
	if n.CgroupRoot != "" {
		fmt.Fprintf(&b, "cgroupRoot: %s\n", n.CgroupRoot)
	}
	b.WriteString(n.Extra)
	return b.String()
}

// KubeletOnly is what the upstream kubelet v1.37 needs on this project's
// machines and fullagent does not read: running on cgroup v1
// (failCgroupV1: false) with swap on (failSwapOn: false), and, unless
// healthzAddress is "" (the caller set it in Common), its healthz there
// instead of 127.0.0.1:10248, which another kubelet on the machine may
// hold.
func KubeletOnly(healthzAddress string) string {
	s := "failCgroupV1: false\nfailSwapOn: false\n"
	if healthzAddress != "" {
		s += fmt.Sprintf("healthzBindAddress: %s\n", healthzAddress)
	}
	return s
}

// Args is the command line both agents take: the node's kubeconfig, the
// configuration file, the node name and IP, and the root dir.
func Args(kubeconfig, config, nodeName, nodeIP, rootDir string) []string {
	return []string{"--kubeconfig=" + kubeconfig, "--config=" + config, "--hostname-override=" + nodeName,
		"--node-ip=" + nodeIP, "--root-dir=" + rootDir}
}
