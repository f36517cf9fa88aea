package main

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/volumemgr"
)

// controllerManagedAttachAnnotation tells the attach/detach controller of
// kube-controller-manager to attach and detach this node's volumes
// (upstream's volumes.kubernetes.io/controller-managed-attach-detach).
// fullagent sets it because enableControllerAttachDetach is true (the
// default; false, the agent attaching volumes itself, is refused at
// start-up: fields.go).
const controllerManagedAttachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

// attachDetachAnnotations are the Node annotations set at registration
// (and on an existing Node) for enableControllerAttachDetach: true.
func attachDetachAnnotations() map[string]string {
	return map[string]string{controllerManagedAttachAnnotation: "true"}
}

// volumesInUse is the node status setter of status.volumesInUse, as
// upstream's nodestatus.VolumesInUse: the attachable volumes the volume
// manager has or wants mounted, once it has found what an earlier run
// left (until then the Node keeps the list it has).
func volumesInUse(vm *volumemgr.Manager) statusmgr.StatusSetter {
	return statusmgr.StatusSetterFunc(func(_ context.Context, node *v1.Node) error {
		if vm != nil && vm.StatesSynced() {
			node.Status.VolumesInUse = vm.VolumesInUse()
		}
		return nil
	})
}

// markVolumesFromNode tells the volume manager which volumes the Node's
// status lists after each status sync: those may now be mounted
// (upstream's ReportedInUse gate).
func markVolumesFromNode(vm *volumemgr.Manager) func(*v1.Node) {
	return func(node *v1.Node) {
		if vm != nil {
			vm.MarkVolumesAsReportedInUse(node.Status.VolumesInUse)
		}
	}
}
