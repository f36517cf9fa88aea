package csi_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

const (
	driverName = "csi.nodekit.test"
	nodeName   = "node-a"
)

// binDir holds the test driver, built once per test binary (driverBin)
// and removed by TestMain.
var binDir string

var driverBin = sync.OnceValues(func() (string, error) { return csitest.Build(binDir) })

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "csitest-bin-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func startDriver(t *testing.T, o csitest.Options) *csitest.Process {
	t.Helper()
	itest.Short(t, "the CSI test driver process")
	bin, err := driverBin()
	if err != nil {
		t.Fatal(err)
	}
	return csitest.Start(t, bin, o)
}

func testContext(t *testing.T) context.Context {
	return klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
}

type env struct {
	t       *testing.T
	ctx     context.Context
	root    string
	cs      *fake.Clientset
	drivers *csi.Drivers
	handler *csi.Handler
	plugin  *csi.Plugin
	drv     *csitest.Process
	// events are the plugin's own (PluginConfig.Events: online expansion).
	events *events
}

// newEnv starts the driver, registers it and builds the plugin over a fake
// clientset holding the node and objs.
func newEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	return newEnvWith(t, csitest.Options{}, objs...)
}

// newEnvWith is newEnv with the driver started with o (its name and node
// ID are the test's).
func newEnvWith(t *testing.T, o csitest.Options, objs ...runtime.Object) *env {
	t.Helper()
	o.Name, o.NodeID = driverName, "drv-node-1"
	drv := startDriver(t, o)
	root, err := os.MkdirTemp("", "csi-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if left := mountsUnder(t, root); len(left) > 0 {
			t.Errorf("mounts left under %s: %v", root, left)
		}
		_ = os.RemoveAll(root)
	})
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}}
	e := &env{t: t, ctx: testContext(t), root: root, cs: fake.NewClientset(append([]runtime.Object{node}, objs...)...),
		drivers: csi.NewDrivers(), drv: drv, events: &events{}}
	e.handler, err = csi.NewHandler(csi.HandlerConfig{Drivers: e.drivers, Client: clientgo.Wrap(e.cs), NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.handler.RegisterPlugin(e.ctx, driverName, drv.Endpoint, []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	e.plugin, err = csi.NewPlugin(csi.PluginConfig{RootDir: root, Drivers: e.drivers, API: csi.FromClient(clientgo.Wrap(e.cs)), NodeName: nodeName, Events: e.events})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// calls returns the driver's call log without the registration's
// NodeGetInfo, with paths relative to the root.
func (e *env) calls() []string {
	e.t.Helper()
	all, err := e.drv.Calls()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, c := range all {
		if strings.HasPrefix(c, "NodeGetInfo") {
			continue
		}
		out = append(out, strings.ReplaceAll(c, e.root+"/", ""))
	}
	return out
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	mps, err := csitest.MountPoints()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mp := range mps {
		if strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

func isMounted(t *testing.T, path string) bool {
	t.Helper()
	ok, err := csitest.IsMountPoint(path)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func csiDriver(modes ...storagev1.VolumeLifecycleMode) *storagev1.CSIDriver {
	f := false
	policy := storagev1.FileFSGroupPolicy
	return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: &f, VolumeLifecycleModes: modes, FSGroupPolicy: &policy}}
}

// boundClaim returns a PVC and the static CSI PV bound to it.
func boundClaim(ns, claim, pvName, handle string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim, UID: types.UID("pvc-uid-" + claim)},
		Spec:       v1.PersistentVolumeClaimSpec{VolumeName: pvName, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}},
		Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			ClaimRef:    &v1.ObjectReference{Namespace: ns, Name: claim, UID: pvc.UID},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driverName, VolumeHandle: handle, FSType: "ext4",
			}},
		},
	}
	return pvc, pv
}

func podWith(name string, uid string, vol v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Spec: v1.PodSpec{Volumes: []v1.Volume{vol}, Containers: []v1.Container{{
			Name: "c", Image: "busybox", VolumeMounts: []v1.VolumeMount{{Name: vol.Name, MountPath: "/data"}},
		}}},
	}
}

func volDir(root, uid, vol string) string {
	return filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~csi", vol)
}
