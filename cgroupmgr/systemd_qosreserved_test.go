package cgroupmgr

import (
	"context"
	"strconv"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
)

// TestSystemdDriverQOSReserved: qosReserved (memory: 50%) with the
// systemd driver against a real systemd sizes the Burstable and
// BestEffort slices as upstream's setMemoryReserve: burstable is
// allocatable (capacity - kubeReserved) less 50% of the Guaranteed pods'
// memory requests, besteffort that less 50% of the Burstable pods'; the
// limit is systemd's unit property (MemoryLimit on v1, MemoryMax on v2)
// and the cgroup file, which agree after systemd reapplies its
// properties (daemon-reload). When a tier already uses more than its new
// limit (a process holding 64Mi in the besteffort slice), the limit is
// set to the usage instead, as upstream's retrySetMemoryReserve. That is
// cgroup v1, where the kernel refuses such a write (EBUSY); on v2 it
// takes it, reclaims and OOM-kills in the tier what it cannot reclaim,
// and neither upstream nor this driver retries: the tier keeps the
// wanted limit and the process holding 64Mi is killed.
func TestSystemdDriverQOSReserved(t *testing.T) {
	v := realCgroups(t)
	sd := privateSystemd(t)
	_, ctx := ktesting.NewTestContext(t)
	m, err := New(Config{
		Driver: DriverSystemd, CgroupsPerQOS: true, EnforceNodeAllocatable: []string{EnforcePods},
		Capacity: rl("cpu", "2", "memory", "4Gi"), KubeReserved: rl("memory", "512Mi"),
		QOSReserved: map[v1.ResourceName]int64{v1.ResourceMemory: 50},
		SystemdBus:  sd.BusAddress, SystemdCgroupBase: sd.CgroupBase,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) { return dialSystemdBus(sd.BusAddress) })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const (
		burstableSlice  = "/kubepods.slice/kubepods-burstable.slice"
		besteffortSlice = "/kubepods.slice/kubepods-besteffort.slice"
	)
	limitProp := map[Version]string{V1: "MemoryLimit", V2: "MemoryMax"}[v]
	limit := func(slice string) (file string, property uint64) {
		t.Helper()
		file = readT(t, cgFile(v, "memory", sd.CgroupBase+slice, "memory.limit_in_bytes", "memory.max"))
		p, _ := unitProp(t, conn, slice[len("/kubepods.slice/"):], limitProp).(uint64)
		return file, p
	}
	want := func(when, slice string, bytes int64) {
		t.Helper()
		file, p := limit(slice)
		if file != strconv.FormatInt(bytes, 10) || p != uint64(bytes) {
			t.Errorf("%s: %s memory limit: file %s, systemd's %s %d; want %d", when, slice, file, limitProp, p, bytes)
		}
	}

	// Allocatable 3.5Gi; 1Gi of Guaranteed and 512Mi of Burstable requests.
	guaranteed := podWith("qa", res(rl("cpu", "100m", "memory", "1Gi"), rl("cpu", "100m", "memory", "1Gi")))
	burstable := podWith("qb", res(rl("memory", "512Mi"), nil))
	bestEffort := podWith("qc", res(nil, nil))
	if err := m.UpdateQOS(ctx, []*v1.Pod{guaranteed, burstable, bestEffort}); err != nil {
		t.Fatal(err)
	}
	want("UpdateQOS", burstableSlice, 3072*mi)  // 3584Mi - 50% of 1Gi
	want("UpdateQOS", besteffortSlice, 2816*mi) // 3072Mi - 50% of 512Mi
	if err := conn.ReloadContext(ctx); err != nil {
		t.Fatal(err)
	}
	want("daemon-reload", burstableSlice, 3072*mi)
	want("daemon-reload", besteffortSlice, 2816*mi)
	if err := m.UpdateQOS(ctx, nil); err != nil {
		t.Fatal(err)
	}
	want("no pods", burstableSlice, 3584*mi)
	want("no pods", besteffortSlice, 3584*mi)

	usage := fillSlice(t, ctx, conn, v, sd.CgroupBase+besteffortSlice, "kubepods-besteffort.slice")
	// 7104Mi of Guaranteed requests leave 32Mi to the two tiers, below
	// what the besteffort slice holds.
	big := podWith("qd", res(rl("cpu", "100m", "memory", "7104Mi"), rl("cpu", "100m", "memory", "7104Mi")))
	if err := m.UpdateQOS(ctx, []*v1.Pod{big}); err != nil {
		t.Fatalf("UpdateQOS with a tier above its limit: %v", err)
	}
	want("tier below its usage", burstableSlice, 32*mi)
	if v == V2 {
		checkOOMKilledV2(t, ctx, conn, sd.CgroupBase+besteffortSlice, usage)
		want("tier below its usage", besteffortSlice, 32*mi)
		return
	}
	// The failed write of 32Mi made the kernel reclaim what it could
	// (page cache) first, so the usage the limit is set to lies between
	// the 64Mi the process holds and what the slice held before.
	// The process may still grow a little after fillSlice saw 64Mi, so
	// the bound above is the slice's peak usage, read after the update.
	peak, _ := strconv.ParseInt(readT(t, cgFile(v, "memory", sd.CgroupBase+besteffortSlice, "memory.max_usage_in_bytes", "memory.peak")), 10, 64)
	file, p := limit(besteffortSlice)
	got, _ := strconv.ParseInt(file, 10, 64)
	if got < 64*mi || got > max(usage, peak) || p != uint64(got) {
		t.Errorf("besteffort slice above its wanted 32Mi (it held %d, peak %d): file %s, systemd's %s %d; want its usage (64Mi to %d) in both", usage, peak, file, limitProp, p, max(usage, peak))
	}
	t.Logf("besteffort slice holding %d bytes: limit %s (wanted 32Mi)", usage, file)
}

// fillSlice runs a process holding 64Mi of anonymous memory in a
// service of slice (a unit of systemd's, as a container's scope would
// be) and returns the slice's memory usage once it holds it; the
// service is stopped at cleanup.
func fillSlice(t *testing.T, ctx context.Context, conn *sddbus.Conn, v Version, literal, slice string) int64 {
	t.Helper()
	unit := "nodekit-test-fill.service"
	ch := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, unit, "replace", []sddbus.Property{
		sddbus.PropSlice(slice),
		sddbus.PropExecStart([]string{"/usr/bin/python3", "-c", "import time\nx = b'x' * (64 << 20)\ntime.sleep(600)"}, false),
		prop("MemoryAccounting", true), prop("DefaultDependencies", false),
	}, ch); err != nil {
		t.Fatal(err)
	}
	if res := <-ch; res != "done" {
		t.Fatalf("start %s: %s", unit, res)
	}
	t.Cleanup(func() {
		stop := make(chan string, 1)
		if _, err := conn.StopUnitContext(context.WithoutCancel(ctx), unit, "replace", stop); err == nil {
			<-stop
		}
	})
	var usage int64
	file := cgFile(v, "memory", literal, "memory.usage_in_bytes", "memory.current")
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		usage, _ = strconv.ParseInt(readT(t, file), 10, 64)
		return usage >= 64*mi, nil
	})
	if err != nil {
		t.Fatalf("%s holds %d bytes after 30s, want 64Mi from %s", file, usage, unit)
	}
	return usage
}
