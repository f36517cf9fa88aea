package main

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agenttest"
)

// TestSystemdCgroupDriverQOSReserved: qosReserved (memory: 50%, behind
// the alpha gate QOSReserved) with cgroupDriver: systemd on the private
// systemd: with the three pods of sdPods running (64Mi of Guaranteed and
// 32Mi of Burstable memory requests), kubepods-burstable.slice's memory
// limit is the node's allocatable memory less 50% of the Guaranteed
// requests and kubepods-besteffort.slice's that less 50% of the Burstable
// ones, as upstream's setMemoryReserve, in systemd's MemoryLimit and in
// memory.limit_in_bytes alike.
func TestSystemdCgroupDriverQOSReserved(t *testing.T) {
	sd, enter := startSDSystemd(t)
	v := newSDView(t, sd)
	e := startProcEnvOpts(t, procEnvOptions{
		cgroupRoot: "/", wrap: enter,
		config: "cgroupDriver: systemd\nfeatureGates:\n  QOSReserved: true\nqosReserved:\n  memory: 50%\n",
		cri:    []agenttest.ContainerdOption{agenttest.WithSystemd(enter, sd.BusAddress)},
	})
	t.Cleanup(func() { stopWrappedAgent(t, e.agent) })
	client := e.client.CoreV1().Pods("default")
	for _, p := range sdPods() {
		p.Spec.NodeName = testNode
		p.Spec.Containers[0].Image = agenttest.BusyboxImage
		if _, err := client.Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range sdPods() {
		e.waitPod(t, p.Name, 2*time.Minute, "Running", podRunning)
	}
	node, err := e.client.CoreV1().Nodes().Get(t.Context(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No kubeReserved or systemReserved: allocatable for the QoS limits
	// is the capacity.
	capacity := node.Status.Capacity.Memory().Value()
	const mi = 1 << 20
	want := map[string]int64{
		"/kubepods.slice/kubepods-burstable.slice":  capacity - 32*mi,
		"/kubepods.slice/kubepods-besteffort.slice": capacity - 32*mi - 16*mi,
	}
	got := map[string]map[string]string{}
	// Each new pod's sandbox sizes the tiers to the active pods; the
	// housekeeping pass (once a minute) does it again.
	err = wait.PollUntilContextTimeout(t.Context(), time.Second, 75*time.Second, true, func(context.Context) (bool, error) {
		ok := true
		for slice, bytes := range want {
			s := v.slice(slice)
			got[slice] = s
			b := strconv.FormatInt(bytes, 10)
			ok = ok && s["MemoryLimit"] == b && s["memory.limit_in_bytes"] == b
		}
		return ok, nil
	})
	if err != nil {
		for slice, bytes := range want {
			t.Errorf("%s: MemoryLimit %s, memory.limit_in_bytes %s; want %d (capacity %d)", slice,
				got[slice]["MemoryLimit"], got[slice]["memory.limit_in_bytes"], bytes, capacity)
		}
	}
	t.Logf("capacity %d: burstable %s, besteffort %s", capacity,
		got["/kubepods.slice/kubepods-burstable.slice"]["MemoryLimit"], got["/kubepods.slice/kubepods-besteffort.slice"]["MemoryLimit"])
	if g := v.slice(sdSlice(mustPod(t, e.env, "guaranteed"))); g["MemoryLimit"] != fmt.Sprint(64*mi) {
		t.Errorf("the Guaranteed pod's slice MemoryLimit %s, want its own 64Mi limit", g["MemoryLimit"])
	}
}

// mustPod reads pod name of the default namespace.
func mustPod(t *testing.T, e *env, name string) *v1.Pod {
	t.Helper()
	p, err := e.client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
