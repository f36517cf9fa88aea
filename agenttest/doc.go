// Package agenttest is nodekit's test kit, in the spirit of envtest: it
// starts the real parts a node agent talks to — a private etcd and
// kube-apiserver (StartControlPlane) and a private containerd with local test
// images (StartContainerd) — and provides a deterministic, hand-written fake
// nodekit.Runtime (FakeRuntime) for unit tests.
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
