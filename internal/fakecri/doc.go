// Package fakecri serves an in-memory container runtime over CRI v1 on a
// unix socket, so that a real node agent (fullagent, the upstream kubelet)
// can run pods against it with nothing running: the bench's fake-runtime
// mode (hack/bench --runtime=fake) measures the agent's own pipeline
// without containerd's sandbox and CNI set-up in the way.
//
// What it owns: one gRPC server with RuntimeService and ImageService v1 on
// Config.Dir/cri.sock, over upstream's in-memory fakes
// (k8s.io/cri-api/pkg/apis/testing FakeRuntimeService and
// FakeImageService), and the empty container log files it creates. On top
// of the fakes it answers as a real runtime would where an agent looks:
//   - Status: RuntimeReady and NetworkReady true, a default and a "runc"
//     handler (recursive read-only mounts, no user namespaces), the
//     supplemental-groups-policy feature, and with verbose a "config" info
//     naming the sandbox image, as containerd does;
//   - Version: runtime "fakecri", CRI API v1 (kubelet accepts the fakes'
//     version 0.1.0); RuntimeConfig: the cgroupfs driver;
//   - every sandbox gets its own pod IP from Config.PodCIDR (a /16 by
//     default); StopPodSandbox stops its containers and RemovePodSandbox
//     removes them, as containerd does;
//   - a started container is RUNNING until stopped; StopContainer exits it
//     with code 137, reason "Error" (a `sleep` as PID 1 ignores SIGTERM and
//     is killed); its status carries the log path, and the log file exists
//     (empty), so kubelet's log rotation finds it;
//   - the images of Config.Images are present; a pull of any other image
//     succeeds at once (the fakes' behaviour);
//   - stats: ListContainerStats/ContainerStats and ListPodSandboxStats/
//     PodSandboxStats answer for every container and sandbox, zero CPU and
//     memory at Config.Clock's time, and ImageFsInfo names Config.Dir as the
//     image filesystem, so kubelet's CRI stats provider, its eviction
//     manager and image GC, and fullagent's stats provider get what they
//     ask for (kubelet's cadvisor still reads the node's own cgroups and
//     filesystems; there are none per container).
//
// What it does not do: run anything, exec, attach, port-forward or
// stream (those, CRI container events, checkpoints and the Stream* list
// calls answer Unimplemented, so clients fall back to the unary lists and
// the relist PLEG, as with containerd 1.6), restart exited containers, or
// keep state across a restart. It makes no cgroups and no network.
package fakecri
