package dratest

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func newTestDriver(t *testing.T) *Driver {
	t.Helper()
	dir := t.TempDir()
	d, err := NewDriver(Config{Name: "dra.nodekit.test", NodeName: "n1", Devices: 2, CDIDir: dir + "/cdi", StateDir: dir + "/state"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func allocatedClaim(uid string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-" + uid, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results},
		}},
	}
}

// TestPrepareUnprepare: preparing writes one CDI spec per claim whose
// device sets DRA_DEVICE_<REQUEST> for each of the driver's devices (not
// another driver's), returns its ID per device, and logs the call;
// preparing again is the same; unpreparing removes the spec and logs,
// also for a claim that was never prepared.
func TestPrepareUnprepare(t *testing.T) {
	d := newTestDriver(t)
	c := allocatedClaim("u1",
		resourceapi.DeviceRequestAllocationResult{Request: "gpu-a", Driver: "dra.nodekit.test", Pool: "n1", Device: "dev-1"},
		resourceapi.DeviceRequestAllocationResult{Request: "other", Driver: "other.example.com", Pool: "n1", Device: "x"},
	)
	for range 2 {
		res, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{c})
		if err != nil {
			t.Fatal(err)
		}
		want := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{{
			Requests: []string{"gpu-a"}, PoolName: "n1", DeviceName: "dev-1",
			CDIDeviceIDs: []string{"dra.nodekit.test/device=claim-u1"},
		}}}
		got := res[c.UID]
		if got.Err != nil || len(got.Devices) != 1 || !slices.Equal(got.Devices[0].CDIDeviceIDs, want.Devices[0].CDIDeviceIDs) ||
			got.Devices[0].DeviceName != "dev-1" || got.Devices[0].PoolName != "n1" || !slices.Equal(got.Devices[0].Requests, want.Devices[0].Requests) {
			t.Fatalf("prepare = %+v, want %+v", got, want)
		}
	}
	data, err := os.ReadFile(d.specPath(c.UID))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Kind != "dra.nodekit.test/device" || len(spec.Devices) != 1 || spec.Devices[0].Name != "claim-u1" ||
		!slices.Equal(spec.Devices[0].ContainerEdits.Env, []string{"DRA_DEVICE_GPU_A=dev-1"}) {
		t.Fatalf("CDI spec %s", data)
	}

	bad := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "unallocated", UID: "u2"}}
	res, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{bad})
	if err != nil || res["u2"].Err == nil {
		t.Fatalf("prepare of an unallocated claim = %+v, %v; want a per-claim error", res, err)
	}

	for _, uid := range []string{"u1", "never"} {
		ures, err := d.UnprepareResourceClaims(t.Context(), []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
		if err != nil || ures[types.UID(uid)] != nil {
			t.Fatalf("unprepare %s = %v, %v", uid, ures, err)
		}
	}
	if _, err := os.Stat(d.specPath(c.UID)); !os.IsNotExist(err) {
		t.Fatalf("CDI spec still there after unprepare: %v", err)
	}
	calls, err := ReadCalls(d.cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if Count(calls, CallPrepare, "u1") != 2 || Count(calls, CallUnprepare, "u1") != 1 || Count(calls, CallUnprepare, "never") != 1 || Count(calls, CallPrepare, "u2") != 0 {
		t.Fatalf("call log %+v", calls)
	}
	if !slices.Equal(calls[0].Devices, []string{"dev-1"}) {
		t.Errorf("first call's devices %v, want [dev-1]", calls[0].Devices)
	}
}

func TestResources(t *testing.T) {
	d := newTestDriver(t)
	pools := d.Resources().Pools
	p, ok := pools["n1"]
	if len(pools) != 1 || !ok || len(p.Slices) != 1 || len(p.Slices[0].Devices) != 2 || p.Slices[0].Devices[1].Name != "dev-1" {
		t.Fatalf("resources %+v: want one pool n1 with dev-0 and dev-1", pools)
	}
}

func TestConfigValidate(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no name":     {NodeName: "n", CDIDir: "c", StateDir: "s"},
		"no node":     {Name: "d", CDIDir: "c", StateDir: "s"},
		"no cdi dir":  {Name: "d", NodeName: "n", StateDir: "s"},
		"no state":    {Name: "d", NodeName: "n", CDIDir: "c"},
		"neg devices": {Name: "d", NodeName: "n", CDIDir: "c", StateDir: "s", Devices: -1},
	} {
		if _, err := NewDriver(cfg); err == nil {
			t.Errorf("%s: NewDriver accepted %+v", name, cfg)
		}
	}
}
