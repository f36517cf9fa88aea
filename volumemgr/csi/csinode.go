package csi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/retry"
)

// NodeIDAnnotation is the Node annotation holding a JSON map of driver name
// to the driver's node ID, as upstream still writes it.
const NodeIDAnnotation = "csi.volume.kubernetes.io/nodeid"

func (h *Handler) install(ctx context.Context, name string, info *nodeInfo) error {
	if info.nodeID == "" {
		return errors.New("error adding CSI driver node info: driverNodeID must not be empty")
	}
	if h.cfg.Client == nil {
		return nil
	}
	err := h.updateNode(ctx, func(n *v1.Node) (bool, error) {
		changed, err := setNodeID(n, name, info.nodeID)
		if err != nil {
			return false, err
		}
		labelled, err := addTopologyLabels(n, info.topology)
		return changed || labelled, err
	})
	if err != nil {
		return fmt.Errorf("error updating Node object with CSI driver node info: %w", err)
	}
	if err := h.updateCSINode(ctx, func(cn *storagev1.CSINode) bool { return installDriver(cn, name, info) }); err != nil {
		return fmt.Errorf("error updating CSINode object with CSI driver node info: %w", err)
	}
	return nil
}

func (h *Handler) uninstall(ctx context.Context, name string) error {
	if h.cfg.Client == nil {
		return nil
	}
	err := h.updateCSINode(ctx, func(cn *storagev1.CSINode) bool {
		n := len(cn.Spec.Drivers)
		cn.Spec.Drivers = slices.DeleteFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == name })
		return len(cn.Spec.Drivers) != n
	})
	if err != nil {
		return fmt.Errorf("error uninstalling CSI driver from CSINode object: %w", err)
	}
	err = h.updateNode(ctx, func(n *v1.Node) (bool, error) { return removeNodeID(n, name) })
	if err != nil {
		return fmt.Errorf("error removing CSI driver node info from Node object: %w", err)
	}
	return nil
}

// updateNode applies change to the Node and updates it when it changed,
// retrying on conflicts.
func (h *Handler) updateNode(ctx context.Context, change func(*v1.Node) (bool, error)) error {
	nodes := h.cfg.Client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, string(h.cfg.NodeName), metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed, err := change(n)
		if err != nil || !changed {
			return err
		}
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// updateCSINode applies change to the node's CSINode, creating it owned by
// the Node when missing (and re-creating one another node of the same name
// left behind), retrying on conflicts.
func (h *Handler) updateCSINode(ctx context.Context, change func(*storagev1.CSINode) bool) error {
	api := h.cfg.Client.StorageV1().CSINodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := h.cfg.Client.CoreV1().Nodes().Get(ctx, string(h.cfg.NodeName), metav1.GetOptions{})
		if err != nil {
			return err
		}
		cn, err := api.Get(ctx, string(h.cfg.NodeName), metav1.GetOptions{})
		if err == nil && !ownedBy(cn, node) {
			if err := api.Delete(ctx, cn.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("error deleting existing CSINode %q owned by a different node: %w", cn.Name, err)
			}
			err = apierrors.NewNotFound(storagev1.Resource("csinodes"), cn.Name)
		}
		if apierrors.IsNotFound(err) {
			cn = &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{
				Name: node.Name,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{}}}
			change(cn)
			_, err = api.Create(ctx, cn, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if !change(cn) {
			return nil
		}
		_, err = api.Update(ctx, cn, metav1.UpdateOptions{})
		return err
	})
}

func ownedBy(cn *storagev1.CSINode, node *v1.Node) bool {
	for _, o := range cn.OwnerReferences {
		if o.Kind == "Node" && o.Name == node.Name && o.UID == node.UID {
			return true
		}
	}
	return false
}

// installDriver puts the driver's entry in cn, reporting whether cn changed.
func installDriver(cn *storagev1.CSINode, name string, info *nodeInfo) bool {
	keys := sets.KeySet(info.topology)
	d := storagev1.CSINodeDriver{Name: name, NodeID: info.nodeID, TopologyKeys: sets.List(keys)}
	if info.maxVolumes > 0 {
		count := int32(min(info.maxVolumes, math.MaxInt32))
		d.Allocatable = &storagev1.VolumeNodeResources{Count: &count}
	}
	i := slices.IndexFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == name })
	if i >= 0 {
		old := cn.Spec.Drivers[i]
		sameCount := (old.Allocatable == nil || old.Allocatable.Count == nil) == (d.Allocatable == nil) &&
			(d.Allocatable == nil || *old.Allocatable.Count == *d.Allocatable.Count)
		if old.NodeID == d.NodeID && sets.New(old.TopologyKeys...).Equal(keys) && sameCount {
			return false
		}
		cn.Spec.Drivers = slices.Delete(cn.Spec.Drivers, i, i+1)
	}
	cn.Spec.Drivers = append(cn.Spec.Drivers, d)
	return true
}

func nodeIDs(n *v1.Node) (map[string]string, error) {
	m := map[string]string{}
	if s := n.Annotations[NodeIDAnnotation]; s != "" {
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("failed to parse node's %q annotation value (%q) err=%w", NodeIDAnnotation, s, err)
		}
	}
	return m, nil
}

func setNodeID(n *v1.Node, driver, id string) (bool, error) {
	m, err := nodeIDs(n)
	if err != nil {
		return false, err
	}
	if m[driver] == id {
		return false, nil
	}
	m[driver] = id
	b, err := json.Marshal(m)
	if err != nil {
		return false, err
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[NodeIDAnnotation] = string(b)
	return true, nil
}

func removeNodeID(n *v1.Node, driver string) (bool, error) {
	m, err := nodeIDs(n)
	if err != nil {
		return false, err
	}
	if _, ok := m[driver]; !ok {
		return false, nil
	}
	delete(m, driver)
	if len(m) == 0 {
		delete(n.Annotations, NodeIDAnnotation)
		return true, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return false, err
	}
	n.Annotations[NodeIDAnnotation] = string(b)
	return true, nil
}

// addTopologyLabels adds the driver's topology segments as node labels;
// a segment contradicting an existing label fails, as upstream.
func addTopologyLabels(n *v1.Node, topology map[string]string) (bool, error) {
	if len(topology) == 0 {
		return false, nil
	}
	changed := false
	for k, v := range topology {
		if cur, ok := n.Labels[k]; ok && cur != v {
			return false, fmt.Errorf("detected topology value collision: driver reported %q:%q but existing label is %q:%q", k, v, k, cur)
		} else if !ok {
			changed = true
		}
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range topology {
		n.Labels[k] = v
	}
	return changed, nil
}
