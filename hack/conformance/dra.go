package main

import (
	"fmt"

	"github.com/nodekit/nodekit/internal/localcri"
)

// draCDIDir is where upstream's DRA test driver writes its CDI spec files:
// the hostPath its proxy pod mounts at /cdi
// (test/e2e/testing-manifests/dra/dra-test-driver-proxy.yaml), one of
// containerd's default cdi_spec_dirs. The node's containerd reads it
// besides its own CDI directory (localcri.Config.CDIDirs).
const draCDIDir = "/var/run/cdi"

// checkDRA refuses a DRA spec set on a runtime without CDI: containerd 1.6
// has none (enable_cdi came with 1.7), so no container would get the
// devices the specs check for.
func checkDRA(set, containerd string) error {
	if isDRA(set) && containerd != localcri.Containerd2 {
		return fmt.Errorf("--dra needs --containerd=2: containerd %s cannot inject CDI devices (enable_cdi came with containerd 1.7)", containerd)
	}
	return nil
}

// draE2EArgs are the e2e.test flags the DRA specs need. The test driver
// runs in e2e.test and reaches the node through a proxy pod whose hostPath
// mounts are the agent's ROOT/plugins/DRIVER and ROOT/plugins_registry, so
// e2e.test must know the agent's root directory (upstream's default is
// /var/lib/kubelet).
func (h *harness) draE2EArgs() []string {
	return []string{"--kubelet-root-dir=" + h.agentRoot}
}
