// Package podresources serves the kubelet podresources gRPC API v1
// (k8s.io/kubelet/pkg/apis/podresources/v1), as upstream kubelet
// (pkg/kubelet/apis/podresources, started by ListenAndServePodResources)
// does on <rootDir>/pod-resources/kubelet.sock (the directory created
// 0750): List, Get (KubeletPodResourcesGet is GA and locked on in v1.37,
// so Get is always served) and GetAllocatableResources, behind upstream's
// rate limit (100 requests a second, bursts of 10; past it a request is
// refused with ResourceExhausted "rejected by rate limit").
//
// Which pods: the active pods (Config.Pods; upstream's
// KubeletPodResourcesListUseActivePods, on by default: admitted pods
// neither terminal nor fully terminated); Get finds a pod among them and
// answers "pod NAME in namespace NS not found" otherwise. Per container
// (the regular containers and the restartable init containers, as
// upstream) it reports the exclusive CPUs (Config.CPUs), the memory
// blocks of the static memory manager (Config.Memory), the device-plugin
// devices (Config.Devices) and the DRA claims (Config.DynamicResources;
// KubeletPodResourcesDynamicResources is GA in v1.37). A provider left
// nil reports nothing. GetAllocatableResources reports the CPUs, memory
// and devices those providers say can be handed out.
//
// It does not own any of the resources (the CPU, memory and device
// managers and a DRA manager do), nor the pod store. It does not report
// the pod-level CPUs and memory of PodLevelResourceManagers (a beta gate,
// off by default).
//
// Run also serves the deprecated v1alpha1 service on the same socket, as
// upstream kubelet v1.37 still does: List only, every pod the agent knows
// (Config.AllPods, terminated pods included as upstream's pod manager
// lists them; the active pods when AllPods is nil) with its regular
// containers and their device-plugin devices, counted in
// pod_resources_endpoint_requests_total{server_api_version="v1alpha1"}.
// RegisterMetrics exports upstream's endpoint counters
// (kubelet_pod_resources_endpoint_requests_total, _requests_list,
// _requests_get_allocatable, _requests_get, _errors_get; not the two error
// counters upstream registers and never increases). The dra
// package's Manager implements DynamicResourcesProvider (the prepared
// claims a container uses); fullagent passes it when it prepares claims.
//
// How an agent wires it:
//
//	s, err := podresources.New(podresources.Config{
//		Dir:  filepath.Join(rootDir, "pod-resources"),
//		Pods: loop, CPUs: cpus, Memory: mem, Devices: devices,
//	})
//	go s.Run(ctx) // serves until ctx is done
package podresources
