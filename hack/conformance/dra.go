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

// draRuntimeConfig are the API versions upstream's DRA e2e cluster serves
// besides the default ones (test/e2e/dra/kind.yaml's runtimeConfig): the
// "with v1beta1 API" and "with v1beta2 API" specs create their objects in
// those versions of resource.k8s.io, which kube-apiserver v1.37 does not
// serve by default.
const draRuntimeConfig = "--runtime-config=resource.k8s.io/v1alpha3=true,resource.k8s.io/v1beta1=true," +
	"resource.k8s.io/v1beta2=true,scheduling.k8s.io/v1beta1=true"

// apiServerArgs are the kube-apiserver flags a spec set adds to localcp's.
func apiServerArgs(set string) []string {
	if isDRA(set) {
		return []string{draRuntimeConfig}
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
