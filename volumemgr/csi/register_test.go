package csi_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

func TestValidatePluginVersions(t *testing.T) {
	h, err := csi.NewHandler(csi.HandlerConfig{Drivers: csi.NewDrivers()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	for _, tc := range []struct {
		versions []string
		want     string
	}{
		{nil, `validation failed for CSI Driver d at endpoint /s: kubernetes.io/csi: ValidatePlugin for CSI driver "d" failed. Plugin returned an empty list for supported versions`},
		{[]string{"0.3.0"}, `None of the versions specified ["0.3.0"] are supported`},
		{[]string{"2.0.0"}, `None of the versions specified ["2.0.0"] are supported`},
		{[]string{"0.3.0", "1.2.0"}, ""},
	} {
		err := h.ValidatePlugin(ctx, "d", "/s", tc.versions)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("versions %v: %v", tc.versions, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("versions %v: error %v, want it to contain %q", tc.versions, err, tc.want)
		}
	}
}

func TestRegisterUpdatesCSINodeAndNode(t *testing.T) {
	drv := startDriver(t, csitest.Options{Name: driverName, NodeID: "drv-node-7", MaxVolumes: 5,
		Topology: map[string]string{"topology.nodekit.test/zone": "z1"}})
	ctx := testContext(t)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid",
		Annotations: map[string]string{csi.NodeIDAnnotation: `{"other.driver":"o1"}`}}}
	cs := fake.NewClientset(node)
	drivers := csi.NewDrivers()
	h, err := csi.NewHandler(csi.HandlerConfig{Drivers: drivers, Client: clientgo.Wrap(cs), NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ValidatePlugin(ctx, driverName, drv.Endpoint, csitest.SupportedVersions); err != nil {
		t.Fatal(err)
	}
	if err := h.RegisterPlugin(ctx, driverName, drv.Endpoint, csitest.SupportedVersions); err != nil {
		t.Fatal(err)
	}
	if d, ok := drivers.Get(driverName); !ok || d.Endpoint != drv.Endpoint || d.Version.String() != "1.0.0" {
		t.Errorf("registry has %+v, %v", d, ok)
	}
	cn, err := cs.StorageV1().CSINodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].Kind != "Node" || cn.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("CSINode owners %+v, want the Node", cn.OwnerReferences)
	}
	if len(cn.Spec.Drivers) != 1 {
		t.Fatalf("CSINode drivers %+v", cn.Spec.Drivers)
	}
	d := cn.Spec.Drivers[0]
	if d.Name != driverName || d.NodeID != "drv-node-7" || strings.Join(d.TopologyKeys, ",") != "topology.nodekit.test/zone" ||
		d.Allocatable == nil || d.Allocatable.Count == nil || *d.Allocatable.Count != 5 {
		t.Errorf("CSINode driver %+v", d)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n.Annotations[csi.NodeIDAnnotation], `{"csi.nodekit.test":"drv-node-7","other.driver":"o1"}`; got != want {
		t.Errorf("nodeid annotation %s, want %s", got, want)
	}
	if n.Labels["topology.nodekit.test/zone"] != "z1" {
		t.Errorf("node labels %v, want the topology segment", n.Labels)
	}
	// An older or equal version of the same driver is refused now.
	if err := h.ValidatePlugin(ctx, driverName, drv.Endpoint, []string{"1.0.0"}); err == nil ||
		!strings.Contains(err.Error(), "Another driver with the same name is already registered with a higher supported version") {
		t.Errorf("re-validation: %v", err)
	}

	h.DeRegisterPlugin(ctx, driverName, drv.Endpoint)
	if _, ok := drivers.Get(driverName); ok {
		t.Error("driver still registered after DeRegisterPlugin")
	}
	cn, err = cs.StorageV1().CSINodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cn.Spec.Drivers) != 0 {
		t.Errorf("CSINode drivers after deregistration: %+v", cn.Spec.Drivers)
	}
	n, _ = cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if got := n.Annotations[csi.NodeIDAnnotation]; got != `{"other.driver":"o1"}` {
		t.Errorf("nodeid annotation after deregistration %s", got)
	}
}

func TestRegisterFailsWhenNodeGetInfoFails(t *testing.T) {
	drv := startDriver(t, csitest.Options{Name: driverName})
	if err := drv.Fail("NodeGetInfo", "Unavailable"); err != nil {
		t.Fatal(err)
	}
	drivers := csi.NewDrivers()
	h, _ := csi.NewHandler(csi.HandlerConfig{Drivers: drivers, Client: clientgo.Wrap(fake.NewClientset()), NodeName: nodeName})
	err := h.RegisterPlugin(testContext(t), driverName, drv.Endpoint, csitest.SupportedVersions)
	if err == nil || !strings.Contains(err.Error(), "code = Unavailable desc = injected failure of NodeGetInfo") {
		t.Errorf("RegisterPlugin: %v", err)
	}
	if _, ok := drivers.Get(driverName); ok {
		t.Error("a driver whose NodeGetInfo failed stays registered")
	}
}
