package csi_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

// blockClaim is boundClaim with a PV of volumeMode Block.
func blockClaim(claim, pvName, handle string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc, pv := boundClaim("default", claim, pvName, handle)
	block := v1.PersistentVolumeBlock
	pvc.Spec.VolumeMode, pv.Spec.VolumeMode = &block, &block
	pv.Spec.CSI.FSType = ""
	return pvc, pv
}

// devicePod is a pod whose container gets the volume as a raw block
// device at /dev/xvda.
func devicePod(name, uid string, vol v1.Volume) *v1.Pod {
	p := podWith(name, uid, vol)
	p.Spec.Containers[0].VolumeMounts = nil
	p.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: vol.Name, DevicePath: "/dev/xvda"}}
	return p
}

func TestBlockStagePublishTeardown(t *testing.T) {
	pvc, pv := blockClaim("claim", "pv-b", "vol-b")
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	m := e.manager(testingclock.NewFakeClock(time.Now()), &events{})
	pod := devicePod("p1", "uid-1", pvcVolume("claim"))
	m.AddPod(pod)
	m.Reconcile(e.ctx)

	publish := filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/uid-1")
	link := filepath.Join(e.root, "pods/uid-1/volumeDevices/kubernetes.io~csi/pv-b")
	global := filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices/pv-b/dev/uid-1")
	devs, err := m.ContainerDevices(e.ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := []nodekit.Device{{PathOnHost: link, PathInContainer: "/dev/xvda", Permissions: "mrw"}}; !slices.Equal(devs, want) {
		t.Fatalf("devices %+v, want %+v", devs, want)
	}
	if got, err := os.Readlink(link); err != nil || got != publish {
		t.Errorf("%s links to %q (%v), want %s", link, got, err, publish)
	}
	st, err := os.Stat(link)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
		t.Errorf("%s is %v, want a block device", link, st.Mode())
	}
	if !isMounted(t, publish) {
		t.Errorf("%s is not a mount point", publish)
	}
	// Upstream's vol_data.json of a block volume, where upstream keeps it;
	// nothing in the pod's volume directory.
	checkBlockVolData(t, e.root, "pv-b", "vol-b")
	wantEvents := []string{
		`Normal SuccessfulMountVolume MapVolume.MapPodDevice succeeded for volume "pv-b" globalMapPath "` + filepath.Dir(global) + `"`,
		`Normal SuccessfulMountVolume MapVolume.MapPodDevice succeeded for volume "pv-b" volumeMapPath "` + filepath.Dir(link) + `"`,
	}
	if got := e.events.all(); !slices.Equal(got, wantEvents) {
		t.Errorf("events %q, want %q", got, wantEvents)
	}
	if _, err := os.Lstat(volDir(e.root, "uid-1", "data")); !os.IsNotExist(err) {
		t.Errorf("the block volume has a pod volume directory %s (%v); upstream has none", volDir(e.root, "uid-1", "data"), err)
	}
	// The descriptor lock: the device bind-mounted on the global map
	// path, a loop device on that.
	if !isMounted(t, global) || !slices.Contains(loopBackingFiles(t), global) {
		t.Errorf("%s: mounted %v, loop backing files %q; want a loop device on the bind mount", global, isMounted(t, global), loopBackingFiles(t))
	}
	// The device is the volume: what is written through it is there.
	f, err := os.OpenFile(link, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("block-data"), 4096); err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	got := make([]byte, 10)
	if _, err := f.ReadAt(got, 4096); err != nil || string(got) != "block-data" {
		t.Errorf("read back %q (%v)", got, err)
	}
	_ = f.Close()
	// Mounts refuse a block volume.
	if _, err := m.ContainerMounts(e.ctx, pod, &pod.Spec.Containers[0]); err != nil {
		t.Errorf("container without volumeMounts: %v", err)
	}

	// Stats: the driver asked at the published device, its size the capacity.
	fs, ok, err := e.plugin.VolumeStats(e.ctx, "uid-1", "data")
	if err != nil || !ok || fs.CapacityBytes == nil || *fs.CapacityBytes != uint64(csitest.DefaultBlockSize) {
		t.Errorf("VolumeStats of the block volume = %+v, %v, %v; want capacity %d", fs, ok, err, csitest.DefaultBlockSize)
	}

	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
	want := []string{
		"NodeStageVolume vol-b plugins/kubernetes.io/csi/volumeDevices/staging/pv-b",
		"NodePublishVolume vol-b plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/uid-1",
		"NodeGetVolumeStats vol-b plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/uid-1",
		"NodeUnpublishVolume vol-b plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/uid-1",
		"NodeUnstageVolume vol-b plugins/kubernetes.io/csi/volumeDevices/staging/pv-b",
	}
	if got := e.calls(); !slices.Equal(got, want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if slices.Contains(loopBackingFiles(t), global) {
		t.Errorf("the loop device on %s is left", global)
	}
	for _, p := range []string{link, publish, filepath.Dir(publish), filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices/pv-b"), filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices/staging/pv-b"),
		volDir(e.root, "uid-1", "data")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
	// The loop device is detached, the data kept in the driver's file.
	img := filepath.Join(e.drv.StateDir, "volumes", "vol-b.img")
	if out, err := exec.Command("losetup", "-j", img).Output(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("losetup -j %s: %q %v, want no loop device", img, out, err)
	}
	data, err := os.ReadFile(img)
	if err != nil || !bytes.Contains(data, []byte("block-data")) {
		t.Errorf("the volume's file lost the data (%v)", err)
	}
}

func TestBlockReadOnlyDevice(t *testing.T) {
	pvc, pv := blockClaim("claim", "pv-r", "vol-r")
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	m := e.manager(testingclock.NewFakeClock(time.Now()), &events{})
	vol := pvcVolume("claim")
	vol.PersistentVolumeClaim.ReadOnly = true
	pod := devicePod("p1", "uid-1", vol)
	m.AddPod(pod)
	m.Reconcile(e.ctx)
	devs, err := m.ContainerDevices(e.ctx, pod, &pod.Spec.Containers[0])
	if err != nil || len(devs) != 1 || devs[0].Permissions != "r" {
		t.Fatalf("devices %+v (%v), want one with permissions r", devs, err)
	}
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
}

// TestVolumeModeMismatch: a Block PV in volumeMounts and a Filesystem PV
// in volumeDevices fail with upstream's messages, among the volumes
// WaitForAttachAndMount could not process (no FailedMount event of the
// reconciler), before any driver call.
func TestVolumeModeMismatch(t *testing.T) {
	bpvc, bpv := blockClaim("block-claim", "pv-b", "vol-b")
	fpvc, fpv := boundClaim("default", "fs-claim", "pv-f", "vol-f")
	e := newEnv(t, bpvc, bpv, fpvc, fpv, csiDriver(storagev1.VolumeLifecyclePersistent))
	ev := &events{}
	m := e.manager(testingclock.NewFakeClock(time.Now()), ev)
	mounts := podWith("mounts-block", "uid-1", pvcVolume("block-claim"))
	devices := devicePod("devices-fs", "uid-2", pvcVolume("fs-claim"))
	m.AddPod(mounts)
	m.AddPod(devices)
	m.Reconcile(e.ctx)
	for pod, want := range map[*v1.Pod]string{
		mounts:  `failed to process volumes=[data]: volume data has volumeMode Block, but is specified in volumeMounts`,
		devices: `failed to process volumes=[data]: volume data has volumeMode Filesystem, but is specified in volumeDevices`,
	} {
		if err := m.WaitForAttachAndMount(e.ctx, pod); err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("WaitForAttachAndMount(%s) = %v, want an error ending %q", pod.Name, err, want)
		}
	}
	if got := ev.all(); len(got) != 0 {
		t.Errorf("events %q, want none", got)
	}
	if got := e.calls(); len(got) != 0 {
		t.Errorf("driver calls %q, want none", got)
	}
	m.RemovePod("uid-1")
	m.RemovePod("uid-2")
	m.Reconcile(e.ctx)
}

// checkBlockVolData checks ROOT/plugins/kubernetes.io/csi/volumeDevices/PV/data/vol_data.json:
// upstream's five keys.
func checkBlockVolData(t *testing.T, root, pv, handle string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "plugins/kubernetes.io/csi/volumeDevices", pv, "data/vol_data.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"specVolID": pv, "volumeHandle": handle, "driverName": driverName, "nodeName": nodeName,
		"attachmentID": fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driverName+nodeName)))}
	if !maps.Equal(got, want) {
		t.Errorf("vol_data.json of %s: %v, want %v", pv, got, want)
	}
}

// deviceSize is the size of the block device at path.
func deviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Seek(0, io.SeekEnd)
}

// TestBlockAfterRestart: a new plugin and manager over the same root (an
// agent restarted) set the still-wanted block volume up again (the device
// still reads what was written) and tear down the one of a pod deleted
// meanwhile from what they find on disk; nothing is left mounted.
func TestBlockAfterRestart(t *testing.T) {
	pvc1, pv1 := blockClaim("c1", "pv-1", "vol-1")
	pvc2, pv2 := blockClaim("c2", "pv-2", "vol-2")
	e := newEnv(t, pvc1, pv1, pvc2, pv2, csiDriver(storagev1.VolumeLifecyclePersistent))
	clk := testingclock.NewFakeClock(time.Now())
	m := e.manager(clk, &events{})
	kept, gone := devicePod("kept", "uid-1", pvcVolume("c1")), devicePod("gone", "uid-2", pvcVolume("c2"))
	m.AddPod(kept)
	m.AddPod(gone)
	m.Reconcile(e.ctx)
	link := filepath.Join(e.root, "pods/uid-1/volumeDevices/kubernetes.io~csi/pv-1")
	f, err := os.OpenFile(link, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("kept-data"), 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	// Restart: new plugin, new manager; only the kept pod comes back.
	var perr error
	if e.plugin, perr = csi.NewPlugin(csi.PluginConfig{RootDir: e.root, Drivers: e.drivers, API: csi.FromClient(clientgo.Wrap(e.cs)), NodeName: nodeName}); perr != nil {
		t.Fatal(perr)
	}
	m = e.manager(clk, &events{})
	m.AddPod(kept)
	m.Reconcile(e.ctx) // the scan of the pod directories, and the kept pod's set-up
	m.CleanupPods(map[types.UID]bool{"uid-1": true})
	m.Reconcile(e.ctx)
	devs, err := m.ContainerDevices(e.ctx, kept, &kept.Spec.Containers[0])
	if err != nil || len(devs) != 1 || devs[0].PathOnHost != link {
		t.Fatalf("devices of the kept pod after the restart: %+v (%v)", devs, err)
	}
	b := make([]byte, 9)
	if f, err := os.Open(link); err != nil {
		t.Fatal(err)
	} else {
		_, err = f.ReadAt(b, 0)
		_ = f.Close()
		if err != nil || string(b) != "kept-data" {
			t.Errorf("the kept device reads %q (%v)", b, err)
		}
	}
	// The set-up again keeps the descriptor lock it found (one loop device
	// on the global map path, not a second) and the driver's one device.
	global := filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices/pv-1/dev/uid-1")
	img := filepath.Join(e.drv.StateDir, "volumes", "vol-1.img")
	loops := map[string]int{}
	for _, f := range loopBackingFiles(t) {
		loops[f]++
	}
	if loops[global] != 1 || loops[img] != 1 {
		t.Errorf("after the restart: %d loop devices on %s, %d on %s; want one each", loops[global], global, loops[img], img)
	}
	// As upstream's reconstruction (the volume uncertain, so SetUpDevice
	// and MapPodDevice run again): the kept volume staged and published a
	// second time, the gone one torn down once.
	calls := e.calls()
	for want, n := range map[string]int{
		"NodeStageVolume vol-1 plugins/kubernetes.io/csi/volumeDevices/staging/pv-1":           2,
		"NodePublishVolume vol-1 plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/uid-1":   2,
		"NodeUnpublishVolume vol-2 plugins/kubernetes.io/csi/volumeDevices/publish/pv-2/uid-2": 1,
		"NodeUnstageVolume vol-2 plugins/kubernetes.io/csi/volumeDevices/staging/pv-2":         1,
		"NodeUnpublishVolume vol-1 plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/uid-1": 0,
	} {
		if got := callCount(calls, want); got != n {
			t.Errorf("%q called %d times, want %d; calls:\n%s", want, got, n, strings.Join(calls, "\n"))
		}
	}
	for _, p := range []string{"pods/uid-2/volumeDevices", "plugins/kubernetes.io/csi/volumeDevices/pv-2", "plugins/kubernetes.io/csi/volumeDevices/publish/pv-2"} {
		if _, err := os.Lstat(filepath.Join(e.root, p)); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
	checkBlockVolData(t, e.root, "pv-1", "vol-1")
	if _, err := os.Lstat(filepath.Join(e.root, "pods/uid-2/volumeDevices/kubernetes.io~csi/pv-2")); !os.IsNotExist(err) {
		t.Errorf("the deleted pod's link is left (%v)", err)
	}
	// The kept pod goes: torn down once, though it was found on disk too.
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
	m.Reconcile(e.ctx)
	calls = e.calls()
	if n := callCount(calls, "NodeUnpublishVolume vol-1 plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/uid-1"); n != 1 {
		t.Errorf("kept's volume unpublished %d times, want once; calls:\n%s", n, strings.Join(calls, "\n"))
	}
	if n := callCount(calls, "NodeUnstageVolume vol-1 plugins/kubernetes.io/csi/volumeDevices/staging/pv-1"); n != 1 {
		t.Errorf("kept's volume unstaged %d times, want once", n)
	}
	if _, err := os.Lstat(filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices/pv-1")); !os.IsNotExist(err) {
		t.Errorf("pv-1's volume directory left behind (%v)", err)
	}
	m.CleanupPods(nil)
	m.Reconcile(e.ctx)
}

// TestBlockOldLayoutMigration: a block volume of the layout nodekit used
// before upstream's (vol_data.json with volumeMode Block in the pod's
// volume directory) is torn down from there after a restart when its pod
// is gone, and moved to upstream's layout when its pod comes back.
func TestBlockOldLayoutMigration(t *testing.T) {
	pvc1, pv1 := blockClaim("c1", "pv-1", "vol-1")
	pvc2, pv2 := blockClaim("c2", "pv-2", "vol-2")
	e := newEnv(t, pvc1, pv1, pvc2, pv2, csiDriver(storagev1.VolumeLifecyclePersistent))
	clk := testingclock.NewFakeClock(time.Now())
	m := e.manager(clk, &events{})
	kept, gone := devicePod("kept", "uid-1", pvcVolume("c1")), devicePod("gone", "uid-2", pvcVolume("c2"))
	m.AddPod(kept)
	m.AddPod(gone)
	m.Reconcile(e.ctx)
	// Rewrite both into the old layout.
	for _, v := range []struct{ uid, pv string }{{"uid-1", "pv-1"}, {"uid-2", "pv-2"}} {
		dataDir := filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices", v.pv, "data")
		b, err := os.ReadFile(filepath.Join(dataDir, "vol_data.json"))
		if err != nil {
			t.Fatal(err)
		}
		var data map[string]string
		if err := json.Unmarshal(b, &data); err != nil {
			t.Fatal(err)
		}
		data["volumeMode"], data["volumeLifecycleMode"] = "Block", "Persistent"
		b, _ = json.Marshal(data)
		dir := volDir(e.root, v.uid, "data")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "vol_data.json"), b, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(dataDir); err != nil {
			t.Fatal(err)
		}
	}

	var perr error
	if e.plugin, perr = csi.NewPlugin(csi.PluginConfig{RootDir: e.root, Drivers: e.drivers, API: csi.FromClient(clientgo.Wrap(e.cs)), NodeName: nodeName}); perr != nil {
		t.Fatal(perr)
	}
	m = e.manager(clk, &events{})
	m.AddPod(kept)
	m.Reconcile(e.ctx)
	m.CleanupPods(map[types.UID]bool{"uid-1": true})
	m.Reconcile(e.ctx)
	m.Reconcile(e.ctx)
	calls := e.calls()
	for _, want := range []string{
		"NodeUnpublishVolume vol-2 plugins/kubernetes.io/csi/volumeDevices/publish/pv-2/uid-2",
		"NodeUnstageVolume vol-2 plugins/kubernetes.io/csi/volumeDevices/staging/pv-2",
	} {
		if !slices.Contains(calls, want) {
			t.Errorf("calls %q, want %q", calls, want)
		}
	}
	for _, p := range []string{volDir(e.root, "uid-1", "data"), "pods/uid-2/volumes/kubernetes.io~csi/data", "pods/uid-2/volumeDevices",
		"plugins/kubernetes.io/csi/volumeDevices/pv-2", "plugins/kubernetes.io/csi/volumeDevices/staging/pv-2"} {
		if !filepath.IsAbs(p) {
			p = filepath.Join(e.root, p)
		}
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
	checkBlockVolData(t, e.root, "pv-1", "vol-1")
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
	m.Reconcile(e.ctx)
	if !slices.Contains(e.calls(), "NodeUnstageVolume vol-1 plugins/kubernetes.io/csi/volumeDevices/staging/pv-1") {
		t.Errorf("pv-1 not unstaged: %q", e.calls())
	}
	if _, err := os.Lstat(filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices/pv-1")); !os.IsNotExist(err) {
		t.Errorf("pv-1's volume directory left behind (%v)", err)
	}
	m.CleanupPods(nil)
	m.Reconcile(e.ctx)
}

func callCount(calls []string, want string) int {
	n := 0
	for _, c := range calls {
		if c == want {
			n++
		}
	}
	return n
}

// loopBackingFiles lists the backing files of the host's loop devices.
func loopBackingFiles(t *testing.T) []string {
	t.Helper()
	files, err := csitest.LoopBackingFiles()
	if err != nil {
		t.Fatal(err)
	}
	return files
}
