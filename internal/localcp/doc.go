// Package localcp runs a real, private Kubernetes control plane on this
// machine: Debian's etcd and an upstream kube-apiserver (v1.37.2, built by
// the project's `make tools` into _output/bin), on free loopback ports, with
// all state in one directory.
//
// It owns, inside Config.Dir:
//   - a throw-away PKI made with crypto/x509 (pki/): a CA, the API server's
//     serving certificate (127.0.0.1, localhost, kubernetes.default.svc...),
//     an admin client certificate (group system:masters), the API server's
//     kubelet-client certificate (CN kube-apiserver-kubelet-client, bound to
//     system:kubelet-api-admin at start) and the service-account RSA key;
//   - node client certificates and kubeconfigs (CN=system:node:NAME,
//     O=system:nodes), so the Node authorizer and NodeRestriction treat a
//     node agent exactly like a kubelet;
//   - the etcd data (etcd/), the process logs (logs/NAME.log) and pidfiles
//     (NAME.pid) used by StopDir and Attach for detached control planes.
//
// The API server runs with --authorization-mode=Node,RBAC and the
// NodeRestriction admission plugin; --kubelet-certificate-authority is not
// set, since node agents serve self-signed certificates.
//
// kube-controller-manager and kube-scheduler run only when asked
// (StartControllerManager, StartScheduler, with the admin credentials, on
// free loopback ports; Stop and StopDir stop them first). Without them
// nothing creates default service accounts, finishes namespace deletion,
// binds PVs or schedules pods: tests bind pods to nodes themselves.
//
// It does not own: the container runtime (internal/localcri), node
// agents, or building the binaries.
// Start always begins with an empty cluster; nothing is kept between runs.
// Processes get only loopback addresses; nothing listens elsewhere.
package localcp
