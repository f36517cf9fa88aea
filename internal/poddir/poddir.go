// Package poddir is the layout of the pod directories under a node
// agent's root directory, upstream kubelet's, in one place:
//
//	ROOT/pods                                  Pods
//	ROOT/pods/UID                              Pod
//	ROOT/pods/UID/volumes                      Volumes
//	ROOT/pods/UID/volumes/PLUGIN/NAME          Volume (PLUGIN escaped: kubernetes.io~empty-dir)
//
// Packages that find a pod's files (the sync loop's housekeeping, the
// volume manager, stats, the runtime's user namespaces) build the paths
// here, so an agent taking over from kubelet, or kubelet from it, finds
// them where the other left them.
package poddir

import (
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// Pods is ROOT/pods, where every pod has its directory.
func Pods(root string) string { return filepath.Join(root, "pods") }

// Pod is ROOT/pods/UID, the pod's directory.
func Pod(root string, uid types.UID) string { return filepath.Join(root, "pods", string(uid)) }

// Volumes is ROOT/pods/UID/volumes, where the pod's volumes are set up.
func Volumes(root string, uid types.UID) string { return filepath.Join(Pod(root, uid), "volumes") }

// Volume is ROOT/pods/UID/volumes/PLUGIN/NAME, volume NAME of a plugin
// whose directory name is plugin (upstream's escaped plugin name, "/"
// replaced by "~": kubernetes.io~empty-dir).
func Volume(root string, uid types.UID, plugin, name string) string {
	return filepath.Join(Volumes(root, uid), plugin, name)
}
