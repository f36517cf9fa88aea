// Package kubeletconf writes what the project's harnesses (hack/bench,
// hack/conformance, fullagent's takeover test) give a node agent on this
// machine: the KubeletConfiguration both fullagent and the upstream
// kubelet read, the few lines only the kubelet needs here, and the common
// command line.
//
// It does not start processes, build binaries or choose ports: callers pass
// the addresses of their own containerd bridge, so that two agents on one
// machine (a harness's and a test's) never listen on the same address.
//
//	conf := kubeletconf.Common(kubeletconf.Node{...})
//	if agent == "kubelet" {
//		conf += kubeletconf.KubeletOnly(gateway)
//	}
package kubeletconf
