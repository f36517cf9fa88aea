package main

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/agenttest"
)

// sdQOSReserved turns qosReserved on for memory at 50% (the QOSReserved
// gate is alpha, off by default).
const sdQOSReserved = "featureGates:\n  QOSReserved: true\nqosReserved:\n  memory: 50%\n"

// TestSystemdCgroupDriverQOSReserved: qosReserved with cgroupDriver:
// systemd on the private systemd and containerd 2. With the three pods of
// sdPods running (64Mi of Guaranteed and 32Mi of Burstable memory
// requests), kubepods-burstable.slice's memory limit is the node's
// allocatable memory (its capacity: nothing reserved) less 50% of the
// Guaranteed requests and kubepods-besteffort.slice's that less 50% of
// the Burstable ones, as upstream's setMemoryReserve, in systemd's
// MemoryLimit and in memory.limit_in_bytes alike; then kubelet v1.37.2
// runs the same pods with the same lines and its slices hold the same.
func TestSystemdCgroupDriverQOSReserved(t *testing.T) {
	v, e, enter, ours := startSDAgent(t, agenttest.ContainerdVersion2, "systemd", sdQOSReserved)
	node, err := e.client.CoreV1().Nodes().Get(t.Context(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capacity := node.Status.Capacity.Memory().Value()
	const mi = 1 << 20
	want := map[string]int64{"kubepods-burstable.slice": capacity - 32*mi, "kubepods-besteffort.slice": capacity - 32*mi - 16*mi}
	for slice, bytes := range want {
		for _, key := range []string{"MemoryLimit", "memory.limit_in_bytes"} {
			if got := ours[slice][key]; got != fmt.Sprint(bytes) {
				t.Errorf("%s %s = %s, want %d (capacity %d)", slice, key, got, bytes, capacity)
			}
		}
	}
	stopWrappedAgent(t, e.agent)
	if t.Failed() {
		return
	}
	stopSlices(t, v)
	theirs := runSDKubelet(t, v, e, enter, sdQOSReserved)
	for slice := range want {
		for _, key := range []string{"MemoryLimit", "memory.limit_in_bytes"} {
			if ours[slice][key] != theirs[slice][key] {
				t.Errorf("%s %s: fullagent %s, kubelet v1.37.2 %s", slice, key, ours[slice][key], theirs[slice][key])
			}
		}
	}
	t.Logf("capacity %d: burstable %s, besteffort %s (kubelet: %s, %s)", capacity,
		ours["kubepods-burstable.slice"]["MemoryLimit"], ours["kubepods-besteffort.slice"]["MemoryLimit"],
		theirs["kubepods-burstable.slice"]["MemoryLimit"], theirs["kubepods-besteffort.slice"]["MemoryLimit"])
}
