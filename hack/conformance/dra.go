package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodekit/nodekit/internal/fsutil"
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

// makeAgentRoot makes the agent's --root-dir: root/root, or for a DRA set
// a directory with a path no longer than upstream's /var/lib/kubelet
// allows for. A DRA driver's socket is ROOT/plugins/DRIVER/dra-POD_UID.sock
// (k8s.io/dynamic-resource-allocation/kubeletplugin with rolling updates,
// no shorter fallback), and unix socket paths end at 107 bytes: the
// "rolling update with long driver name" spec's driver
// gpu.dra-example-driver.sigs.k8s.io leaves 18 bytes for ROOT, where
// /tmp/nkconf-N/agent/root has up to 33. The directory, /run/nkN (at most
// 17 bytes), is unmounted below and removed when the run ends, after the
// agent has stopped.
func (h *harness) makeAgentRoot(root string) (string, error) {
	if !isDRA(h.set) {
		return filepath.Join(root, "root"), nil
	}
	dir, err := os.MkdirTemp("/run", "nk")
	if err != nil {
		return "", fmt.Errorf("agent root dir: %w", err)
	}
	h.onCleanup(func() {
		h.stopProcs() // the agent first: its pods' volumes are mounted below dir
		if _, err := fsutil.UnmountBelow(dir); err != nil {
			fmt.Fprintln(os.Stderr, "conformance:", err)
		}
		_ = os.RemoveAll(dir)
	})
	return dir, nil
}
