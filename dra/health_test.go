package dra

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func report(pool, device string, h drahealthv1.HealthStatus, timeoutSecs int64, msg string) *drahealthv1.DeviceHealth {
	return &drahealthv1.DeviceHealth{Device: &drahealthv1.DeviceIdentifier{PoolName: pool, DeviceName: device},
		Health: h, HealthCheckTimeoutSeconds: timeoutSecs, Message: msg}
}

// TestHealthStoreTimeouts: a report holds for its device's timeout (30 s
// by default, negative is the default); then the device reads Unknown,
// and the next report that leaves it out forgets it (a change, unless it
// was Unknown). Repeating a report changes nothing; long messages are
// cut to the API's limit.
func TestHealthStoreTimeouts(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Unix(1700000000, 0))
	path := filepath.Join(t.TempDir(), HealthCheckpointFile)
	s, err := newHealthStore(fc, path)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := s.get("d", "p", "a"); h != v1.ResourceHealthStatusUnknown {
		t.Fatalf("never reported: %s, want Unknown", h)
	}
	long := strings.Repeat("x", 2000)
	changed, _, err := s.update("d", []*drahealthv1.DeviceHealth{
		report("p", "a", drahealthv1.HealthStatus_HEALTHY, -5, ""),
		report("p", "b", drahealthv1.HealthStatus_UNHEALTHY, 60, long),
		report("p", "c", drahealthv1.HealthStatus_UNKNOWN, 0, ""),
	})
	if err != nil || len(changed) != 3 {
		t.Fatalf("first report: changed %v (%v), want all 3", changed, err)
	}
	h, msg := s.get("d", "p", "b")
	if h != v1.ResourceHealthStatusUnhealthy || len(msg) != v1.ResourceHealthMessageMaxLength || !strings.HasSuffix(msg, "...") {
		t.Errorf("b = %s with a %d-byte message, want Unhealthy with %d bytes ending in ...", h, len(msg), v1.ResourceHealthMessageMaxLength)
	}
	if changed, _, _ := s.update("d", []*drahealthv1.DeviceHealth{
		report("p", "a", drahealthv1.HealthStatus_HEALTHY, 0, ""),
		report("p", "b", drahealthv1.HealthStatus_UNHEALTHY, 60, long),
		report("p", "c", drahealthv1.HealthStatus_UNKNOWN, 0, ""),
	}); len(changed) != 0 {
		t.Errorf("same report again: changed %v, want none", changed)
	}

	fc.Step(31 * time.Second)
	if h, _ := s.get("d", "p", "a"); h != v1.ResourceHealthStatusUnknown {
		t.Errorf("a after 31 s (default timeout 30 s): %s, want Unknown", h)
	}
	if h, _ := s.get("d", "p", "b"); h != v1.ResourceHealthStatusUnhealthy {
		t.Errorf("b after 31 s (timeout 60 s): %s, want Unhealthy", h)
	}
	changed, _, _ = s.update("d", []*drahealthv1.DeviceHealth{report("p", "b", drahealthv1.HealthStatus_HEALTHY, 60, "msg")})
	slices.SortFunc(changed, func(x, y healthKey) int { return strings.Compare(x.device, y.device) })
	if want := []healthKey{{"p", "a"}, {"p", "b"}}; !slices.Equal(changed, want) {
		t.Errorf("report of b alone: changed %v, want %v (a timed out to Unknown; c was Unknown already)", changed, want)
	}
	if _, ok := s.drivers["d"][healthKey{"p", "c"}]; ok {
		t.Error("c, timed out and left out of the report, is still kept")
	}
	// The checkpoint holds what the store holds: a restart keeps b.
	restored, err := newHealthStore(fc, path)
	if err != nil {
		t.Fatal(err)
	}
	if h, msg := restored.get("d", "p", "b"); h != v1.ResourceHealthStatusHealthy || msg != "msg" || len(restored.drivers["d"]) != 1 {
		t.Errorf("restored b = %s %q of %d devices, want Healthy \"msg\", the one device kept", h, msg, len(restored.drivers["d"]))
	}
	if got, err := s.clear("d"); err != nil || len(got) != 1 || got[0] != (healthKey{"p", "b"}) {
		t.Errorf("clear = %v (%v), want [p/b]", got, err)
	}
	if h, _ := s.get("d", "p", "b"); h != v1.ResourceHealthStatusUnknown {
		t.Errorf("b after clear: %s, want Unknown", h)
	}
	if restored, _ := newHealthStore(fc, path); len(restored.drivers) != 0 {
		t.Errorf("after clear the checkpoint holds %v, want nothing", restored.drivers)
	}
}

// TestHealthCheckpointUpstreamFormat: a checkpoint as kubelet writes it
// is read (timeouts of 0 are the default); a corrupt one leaves the store
// empty with an error, as upstream, and does not stop New.
func TestHealthCheckpointUpstreamFormat(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 7, 0, 10, 0, time.UTC))
	root := t.TempDir()
	kubelet := `{"gpu.example.com":{"Devices":{"pool-a/gpu-0":{"PoolName":"pool-a","DeviceName":"gpu-0","Health":"Unhealthy",` +
		`"LastUpdated":"2026-12-02T07:00:00Z","HealthCheckTimeout":0,"Message":"XID 79"}}}}`
	if err := os.WriteFile(filepath.Join(root, HealthCheckpointFile), []byte(kubelet), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{RootDir: root, Claims: &claims{}, Clock: fc})
	if err != nil || m.healthErr != nil {
		t.Fatalf("New: %v, health checkpoint: %v", err, m.healthErr)
	}
	if h, msg := m.health.get("gpu.example.com", "pool-a", "gpu-0"); h != v1.ResourceHealthStatusUnhealthy || msg != "XID 79" {
		t.Errorf("kubelet's entry read as %s %q, want Unhealthy \"XID 79\"", h, msg)
	}
	fc.Step(25 * time.Second) // 35 s after LastUpdated, beyond the default 30 s
	if h, _ := m.health.get("gpu.example.com", "pool-a", "gpu-0"); h != v1.ResourceHealthStatusUnknown {
		t.Errorf("after its timeout: %s, want Unknown", h)
	}
	if err := os.WriteFile(filepath.Join(root, HealthCheckpointFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err = New(Config{RootDir: root, Claims: &claims{}, Clock: fc})
	if err != nil || m.healthErr == nil || len(m.health.drivers) != 0 {
		t.Errorf("corrupt health checkpoint: New %v, health error %v, %d drivers; want New to succeed, an error kept for Run, no drivers", err, m.healthErr, len(m.health.drivers))
	}
}

// TestAllocatedResourcesStatus: a container's entry per claim reference,
// its devices of the request it names, Unknown until the driver reports,
// then the reported health (the message only with HealthMessages), and a
// notice for the pod on HealthUpdates.
func TestAllocatedResourcesStatus(t *testing.T) {
	d := startDriver(t)
	d.requests["c"] = []string{"r1", "r2"}
	pod := podWith("one", "r1", "c")
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "all", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "pc-c"}}}})
	cl := &claims{}
	cl.add(allocated("c", []string{"r1", "r2"}, pod))
	m := newManager(t, t.TempDir(), cl, d)
	if got := m.AllocatedResourcesStatus(pod, "c"); len(got) != 0 {
		t.Fatalf("before prepare: %v, want none", got)
	}
	if err := m.PrepareResources(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	got := m.AllocatedResourcesStatus(pod, "c")
	want := []v1.ResourceStatus{{Name: "claim:pc-c/r1", Resources: []v1.ResourceHealth{{ResourceID: testDriver + "/dev=c-r1", Health: v1.ResourceHealthStatusUnknown}}}}
	if !equalStatus(got, want) {
		t.Fatalf("before any report: %+v, want %+v", got, want)
	}
	m.recordHealth(t.Context(), testDriver, []*drahealthv1.DeviceHealth{
		report("pool", "c-r1", drahealthv1.HealthStatus_UNHEALTHY, 0, "ECC errors"),
		report("pool", "c-r2", drahealthv1.HealthStatus_HEALTHY, 0, ""),
	})
	select {
	case uid := <-m.HealthUpdates():
		if uid != pod.UID {
			t.Errorf("notice for %s, want %s", uid, pod.UID)
		}
	default:
		t.Error("no notice on HealthUpdates after the pod's devices changed")
	}
	want[0].Resources[0].Health = v1.ResourceHealthStatusUnhealthy
	if got := m.AllocatedResourcesStatus(pod, "c"); !equalStatus(got, want) {
		t.Errorf("after the report, messages off: %+v, want %+v", got, want)
	}
	m.cfg.HealthMessages = true
	got = m.AllocatedResourcesStatus(pod, "c")
	if len(got) != 1 || got[0].Resources[0].Message == nil || *got[0].Resources[0].Message != "ECC errors" {
		t.Errorf("messages on: %+v, want the driver's message", got)
	}
	all := m.AllocatedResourcesStatus(pod, "all")
	if len(all) != 1 || all[0].Name != "claim:pc-c" || len(all[0].Resources) != 2 ||
		all[0].Resources[0].Health != v1.ResourceHealthStatusUnhealthy || all[0].Resources[1].Health != v1.ResourceHealthStatusHealthy {
		t.Errorf("container naming no request: %+v, want claim:pc-c with both devices (Unhealthy, Healthy)", all)
	}
	if got := m.AllocatedResourcesStatus(pod, "missing"); got != nil {
		t.Errorf("unknown container: %+v, want nil", got)
	}
}

func equalStatus(a, b []v1.ResourceStatus) bool {
	return slices.EqualFunc(a, b, func(x, y v1.ResourceStatus) bool {
		return x.Name == y.Name && slices.EqualFunc(x.Resources, y.Resources, func(p, q v1.ResourceHealth) bool {
			return p.ResourceID == q.ResourceID && p.Health == q.Health && (p.Message == nil) == (q.Message == nil)
		})
	})
}

// fakeHealth serves NodeWatchResources: each stream sends what arrives on
// reports until the client goes away; with unimplemented it refuses.
type fakeHealth struct {
	drahealthv1.UnimplementedDRAResourceHealthServer
	reports       chan *drahealthv1.NodeWatchResourcesResponse
	opened        chan struct{}
	unimplemented bool
}

func (f *fakeHealth) NodeWatchResources(_ *drahealthv1.NodeWatchResourcesRequest, stream grpc.ServerStreamingServer[drahealthv1.NodeWatchResourcesResponse]) error {
	f.opened <- struct{}{}
	if f.unimplemented {
		return status.Error(codes.Unimplemented, "no health here")
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case r := <-f.reports:
			if err := stream.Send(r); err != nil {
				return err
			}
		}
	}
}

// TestHealthWatch: a driver registering with the health service is
// watched; its report reaches the pods' status and wakes them; its
// deregistration ends the stream and its devices read Unknown again.
// A driver offering only v1alpha1 is read through it.
func TestHealthWatch(t *testing.T) {
	for _, service := range []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService} {
		t.Run(service, func(t *testing.T) { testHealthWatch(t, service) })
	}
}

func testHealthWatch(t *testing.T, service string) {
	fh := &fakeHealth{reports: make(chan *drahealthv1.NodeWatchResourcesResponse), opened: make(chan struct{}, 10)}
	d := startDriverWith(t, func(s *grpc.Server) {
		if service == drahealthv1alpha1.DRAResourceHealthService {
			drahealthv1alpha1.RegisterDRAResourceHealthServer(s, drahealthv1.V1ServerWrapper{Server: fh})
			return
		}
		drahealthv1.RegisterDRAResourceHealthServer(s, fh)
	})
	d.requests["c"] = []string{"r"}
	pod := podWith("one", "", "c")
	cl := &claims{}
	cl.add(allocated("c", []string{"r"}, pod))
	m, err := New(Config{RootDir: t.TempDir(), Claims: cl, ReportHealth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.closeDrivers)
	if err := m.RegisterPlugin(t.Context(), testDriver, d.endpoint, []string{drapb.DRAPluginService, service}); err != nil {
		t.Fatal(err)
	}
	if err := m.PrepareResources(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fh.opened, "the health stream to open")
	fh.reports <- &drahealthv1.NodeWatchResourcesResponse{Devices: []*drahealthv1.DeviceHealth{report("pool", "c-r", drahealthv1.HealthStatus_UNHEALTHY, 0, "")}}
	if uid := waitFor(t, m.HealthUpdates(), "a notice for the pod"); uid != pod.UID {
		t.Errorf("notice for %s, want %s", uid, pod.UID)
	}
	if got := m.AllocatedResourcesStatus(pod, "c"); len(got) != 1 || got[0].Resources[0].Health != v1.ResourceHealthStatusUnhealthy {
		t.Errorf("after the report: %+v, want the device Unhealthy", got)
	}
	m.DeRegisterPlugin(t.Context(), testDriver, d.endpoint)
	if uid := waitFor(t, m.HealthUpdates(), "a notice once the stream ended"); uid != pod.UID {
		t.Errorf("notice for %s, want %s", uid, pod.UID)
	}
	if got := m.AllocatedResourcesStatus(pod, "c"); len(got) != 1 || got[0].Resources[0].Health != v1.ResourceHealthStatusUnknown {
		t.Errorf("after deregistration: %+v, want the device Unknown", got)
	}
}

// TestHealthWatchOffOrUnsupported: without ReportHealth, or for a driver
// not offering the service, no stream is opened; a driver answering
// Unimplemented is asked once and not again.
func TestHealthWatchOffOrUnsupported(t *testing.T) {
	fh := &fakeHealth{opened: make(chan struct{}, 10), unimplemented: true}
	d := startDriverWith(t, func(s *grpc.Server) { drahealthv1.RegisterDRAResourceHealthServer(s, fh) })
	for _, tc := range []struct {
		report   bool
		versions []string
	}{
		{false, []string{drapb.DRAPluginService, drahealthv1.DRAResourceHealthService}},
		{true, []string{drapb.DRAPluginService}},
	} {
		m, err := New(Config{RootDir: t.TempDir(), Claims: &claims{}, ReportHealth: tc.report})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterPlugin(t.Context(), testDriver, d.endpoint, tc.versions); err != nil {
			t.Fatal(err)
		}
		m.closeDrivers() // waits for any watch
		if len(fh.opened) != 0 {
			t.Errorf("ReportHealth %v, versions %v: a health stream was opened", tc.report, tc.versions)
		}
	}
	fc := clocktesting.NewFakeClock(time.Unix(1700000000, 0))
	m, err := New(Config{RootDir: t.TempDir(), Claims: &claims{}, ReportHealth: true, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterPlugin(t.Context(), testDriver, d.endpoint, []string{drapb.DRAPluginService, drahealthv1.DRAResourceHealthService}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fh.opened, "the health stream to open")
	m.watches.Wait() // the watch stops by itself on Unimplemented
	if fc.HasWaiters() {
		t.Error("the watch waits to retry a driver that answered Unimplemented")
	}
	m.closeDrivers()
	if len(fh.opened) != 0 {
		t.Errorf("the stream was opened %d more times", len(fh.opened))
	}
}

func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// TestPickHealthService: the newest health service both sides speak, ""
// for a driver offering none (it is optional).
func TestPickHealthService(t *testing.T) {
	v1s, v1a := drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService
	for _, tc := range []struct {
		versions []string
		want     string
	}{
		{[]string{drapb.DRAPluginService, v1a, v1s}, v1s},
		{[]string{drapb.DRAPluginService, v1a}, v1a},
		{[]string{drapb.DRAPluginService, "v2.DRAResourceHealth"}, ""},
	} {
		if got := pickHealthService(tc.versions); got != tc.want {
			t.Errorf("pickHealthService(%q) = %q, want %q", tc.versions, got, tc.want)
		}
	}
}
