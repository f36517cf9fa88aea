// Package devicemgr is the device plugin manager, as upstream kubelet's
// (pkg/kubelet/cm/devicemanager): it serves the v1beta1 Registration
// service on <Dir>/kubelet.sock (Dir defaults to
// /var/lib/kubelet/device-plugins), connects to each plugin that
// registers an extended resource (example.com/foo), follows its devices
// and their health through ListAndWatch, hands devices to containers at
// admission (GetPreferredAllocation when the plugin offers it, then
// Allocate), calls PreStartContainer when the plugin asks for it, and
// keeps the allocations in <Dir>/kubelet_internal_checkpoint, upstream's
// file format and checksum, so they survive an agent restart and kubelet
// and a nodekit agent can take over from each other.
//
// A plugin that goes away leaves its devices unhealthy (capacity stays,
// allocatable drops to what is healthy); after the grace period (5
// minutes) its resource is reported removed. A plugin registering a
// resource that another connection serves replaces it. Devices of pods no
// longer active are reclaimed before new ones are handed out.
//
// AllocatedResourcesStatus gives a container's allocatedResourcesStatus:
// the health of each device it holds, as the plugin last reported it;
// with Config.ReportHealth (the ResourceHealthStatus gate) the pods
// holding a device whose health changed arrive on HealthUpdates.
//
// It does not own the node status (Resources and Changes feed it), pods
// (Config.ActivePods says which are active), NUMA alignment with the CPU
// and memory managers, the PodResources API, DRA, or the plugin watcher
// for the newer plugins-registry socket directory.
//
// How an agent wires it:
//
//	dm, err := devicemgr.New(ctx, devicemgr.Config{ActivePods: store.NotTerminatedPods}) // syncloop.NewPodStore()
//	go dm.Run(ctx)                        // registration server until ctx is done
//	chain.Add(dm)                         // a nodekit.Admitter, before admission.Builtins
//	// at container creation: the plugins' envs, mounts, devices and
//	// annotations merged into the other node-side options
//	req.Options = dm.WrapOptions(builder.Options(podDir))
//	// (or dm.ContainerOptions(ctx, pod, c) and merge them yourself)
//	// node status: on every signal, and on every periodic status update
//	for range dm.Changes() {
//		capacity, allocatable, removed := dm.Resources()
//		// set capacity/allocatable in node.Status, delete the removed names
//	}
//
// Package deviceplugintest is a fake plugin serving N devices over a real
// unix socket, for tests.
package devicemgr
