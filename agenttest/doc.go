// Package agenttest is nodekit's test kit, in the spirit of envtest: it
// starts the real parts a node agent talks to — a private etcd and
// kube-apiserver (StartControlPlane) and a private containerd with local test
// images (StartContainerd) — and provides a deterministic, hand-written fake
// nodekit.Runtime (FakeRuntime) for unit tests.
//
// SimNode is a simulated node: the real syncloop, PLEG and status manager
// over a FakeRuntime, with statuses published to memory. It runs in two
// ways. Started (StartSimNode) it runs on goroutines, inside a
// testing/synctest bubble (Settle) or on real time (WaitFor). Stepped
// (SimOptions.Clock set to a fake clock) nothing runs by itself: Step runs
// one round of relist, loop drain, housekeeping and status publishing on
// the test's goroutine, and Advance moves time on a second at a time, so a
// scripted scenario (syncloop's testdata/*.txt) is deterministic:
//
//	clk := testingclock.NewFakeClock(start)
//	n := agenttest.StartSimNode(t, agenttest.SimOptions{Clock: clk})
//	n.AddPod(pod)
//	_ = n.Advance(ctx, time.Second)
//	_ = n.Runtime().ExitContainer(pod.UID, "app", 1)
//	_ = n.Advance(ctx, 2*time.Second)
//	st, _ := n.ContainerStatus(pod.UID, "app") // RestartCount 1
//
// With SimOptions.InPlaceResize a SimNode resizes pods in place as
// fullagent does (package allocation, fitted to SimOptions.Allocatable);
// Events lists what the loop and the resizer recorded on a pod, and
// PodStore answers for the node's loop as it does for an agent's parts.
//
// Tests that need the real binaries skip with a message naming what is
// missing, unless NODEKIT_REQUIRE_INTEGRATION is set (CI sets it), in which
// case they fail: CI never skips silently.
//
//	func TestMyAgent(t *testing.T) {
//		cp := agenttest.StartControlPlane(t)
//		cri := agenttest.StartContainerd(t)
//		// build the agent under test from cp.Admin and cri.Endpoint
//	}
package agenttest
