// Package dra is the node side of Dynamic Resource Allocation (DRA): it
// prepares the devices the scheduler allocated to a pod's ResourceClaims
// by calling the claim's DRA driver (NodePrepareResources of the kubelet
// plugin gRPC API, k8s.io/kubelet/pkg/apis/dra v1 and v1beta1), hands the
// returned CDI device IDs to each container that references the claim, and
// unprepares a claim when the last pod using it on this node has stopped.
//
// It owns the claim cache and its checkpoint (ROOT/dra_manager_state, the
// format upstream kubelet writes), the registry of drivers (the plugin
// watcher calls ValidatePlugin, RegisterPlugin and DeRegisterPlugin), and
// the removal of a driver's ResourceSlices of this node once it has been
// gone for a grace period. It does not watch the plugin directory
// (package pluginwatcher does), allocate claims (the scheduler does) or
// create claims from templates (the controller manager does); it does not
// write status.resourceClaimStatuses, which the controller manager owns.
//
// With Config.ReportHealth (the ResourceHealthStatus gate) it follows the
// device health of each registered driver that serves the optional
// DRAResourceHealth service (v1, else v1alpha1; NodeWatchResources), keeps
// it by driver, pool and device with upstream's timeouts (a device not
// reported for its timeout, 30 s by default, reads Unknown), and gives a
// container's allocatedResourcesStatus (AllocatedResourcesStatus); the
// pods a change concerns arrive on HealthUpdates. The health is
// checkpointed in ROOT/dra_health_state, upstream's file and format.
//
// Usage sketch:
//
//	m, err := dra.New(dra.Config{RootDir: root, Claims: claims, Slices: slices})
//	go m.Run(ctx)                        // startup slice cleanup, reconcile
//	handlers["DRAPlugin"] = m            // plugin watcher
//	// the sync loop: m.PrepareResources before a pod's sandbox,
//	// m.UnprepareResources once its containers stopped;
//	// container options: m.WrapOptions(next) adds CDI device IDs;
//	// container statuses: m.AllocatedResourcesStatus(pod, name),
//	// resynced for each UID from m.HealthUpdates().
package dra
