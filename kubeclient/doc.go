// Package kubeclient is a Kubernetes API client for the groups and
// resources a node agent uses, and nothing else.
//
// client-go's generated clientset (k8s.io/client-go/kubernetes) links
// every API group into the binary: each typed client package imports its
// scheme, which registers every type of every group at start-up, and the
// clientset's interface reaches every group's typed client. In a node
// agent that is about 8 MiB of mapped code and data of which the agent
// uses a tenth, and most of it becomes resident (the kernel maps a
// binary's pages in 64 KiB windows around each one touched). Client
// encodes, decodes and registers only core/v1, coordination/v1,
// storage/v1, resource/v1, node/v1, certificates/v1, authentication/v1 and
// authorization/v1.
//
// Its requests are client-go's own: each resource is a small typed
// client over a rest.RESTClient per group version that builds each
// request as client-go's generated clients do (k8s.io/client-go/gentype,
// which is not linked: it brings client-go's apply configurations and
// structured-merge-diff with it), protobuf preferred, and every group
// shares one token-bucket rate limiter built from the rest.Config's QPS
// and Burst, so an agent that moves from the clientset to a Client keeps
// the request budget its operator configured (KubeletConfiguration
// kubeAPIQPS and kubeAPIBurst).
//
// The resource interfaces (Pods, Nodes, Leases, ...) carry the methods a
// node agent calls with client-go's signatures, so the typed clients of a
// client-go clientset, fake or real, satisfy them: package clientgo wraps
// a kubernetes.Interface as an Interface for tests that build their
// objects with k8s.io/client-go/kubernetes/fake, and for code that still
// holds a clientset. A package that takes an Interface instead of a
// kubernetes.Interface no longer links the clientset; the binary loses it
// once nothing in it imports client-go's typed clients, informers or
// clientset.
package kubeclient
