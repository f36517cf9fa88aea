package volumemgr_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/volumemgr"
)

// attachablePlugin handles hostPath volumes under /attach: the ones under
// /attach/ctl are attached by a controller (their unique name is
// example.com/attach^PATH), the others not; SetUp fails with waitErr while
// it is set.
type attachablePlugin struct {
	mu      sync.Mutex
	setUps  []string
	waitErr error
}

func (*attachablePlugin) Name() string { return "example.com/attach" }
func (*attachablePlugin) CanSupport(vol *v1.Volume) bool {
	return vol.HostPath != nil && strings.HasPrefix(vol.HostPath.Path, "/attach")
}
func (p *attachablePlugin) AttachableName(_ context.Context, req *volumemgr.AttachableRequest) (v1.UniqueVolumeName, error) {
	if req.Volume == nil { // found on disk: SetUp left the name
		b, err := os.ReadFile(filepath.Join(req.Dir, "name"))
		return v1.UniqueVolumeName(b), err
	}
	if !strings.HasPrefix(req.Volume.HostPath.Path, "/attach/ctl") {
		return "", nil
	}
	return v1.UniqueVolumeName("example.com/attach^" + req.Volume.HostPath.Path), nil
}
func (p *attachablePlugin) SetUp(_ context.Context, req *volumemgr.SetUpRequest) (*volumemgr.SetUpResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waitErr != nil {
		return nil, p.waitErr
	}
	p.setUps = append(p.setUps, req.Volume.Name)
	if err := os.MkdirAll(req.Dir, 0o755); err != nil {
		return nil, err
	}
	name := ""
	if strings.HasPrefix(req.Volume.HostPath.Path, "/attach/ctl") {
		name = "example.com/attach^" + req.Volume.HostPath.Path
	}
	return &volumemgr.SetUpResult{}, os.WriteFile(filepath.Join(req.Dir, "name"), []byte(name), 0o644)
}
func (*attachablePlugin) TearDown(_ context.Context, req *volumemgr.TearDownRequest) error {
	return os.RemoveAll(req.Dir)
}
func (p *attachablePlugin) calls() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprint(p.setUps)
}

func hostPathVolume(name, path string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path}}}
}

// TestVolumesInUseGate: an attachable volume is listed in VolumesInUse as
// soon as it is to be mounted, is set up only after the node's status
// listed it (MarkVolumesAsReportedInUse), with no FailedMount event while
// it waits, and leaves the list when torn down; a volume nothing attaches
// is neither listed nor held.
func TestVolumesInUseGate(t *testing.T) {
	p := &attachablePlugin{}
	f := newFixture(t, func(c *volumemgr.Config) { c.Plugins = []volumemgr.Plugin{p} })
	if f.m.StatesSynced() {
		t.Fatal("StatesSynced before the first Reconcile")
	}
	pod := testPod("db", hostPathVolume("data", "/attach/ctl/disk1"), hostPathVolume("local", "/attach/local"))
	f.m.AddPod(pod)
	f.reconcile()
	if !f.m.StatesSynced() {
		t.Fatal("not StatesSynced after a Reconcile")
	}
	if got := fmt.Sprint(f.m.VolumesInUse()); got != "[example.com/attach^/attach/ctl/disk1]" {
		t.Fatalf("VolumesInUse = %s", got)
	}
	if got := p.calls(); got != "[local]" {
		t.Fatalf("set-ups before the node reported the volume in use: %s, want only local", got)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	err := f.m.WaitForAttachAndMount(ctx, pod)
	if err == nil || !strings.Contains(err.Error(), "unmounted volumes=[data], unattached volumes=[data]") ||
		!strings.Contains(err.Error(), `Volume has not been added to the list of VolumesInUse in the node's volume status for volume "example.com/attach^/attach/ctl/disk1"`) {
		t.Fatalf("WaitForAttachAndMount = %v", err)
	}
	f.step(5 * time.Second)
	if got := p.calls(); got != "[local]" {
		t.Fatalf("set-ups while not reported: %s", got)
	}
	if ev := f.events.all(); len(ev) != 0 {
		t.Fatalf("events while waiting for volumesInUse: %q", ev)
	}

	f.m.MarkVolumesAsReportedInUse([]v1.UniqueVolumeName{"example.com/attach^/attach/ctl/disk1"})
	f.reconcile() // the mark clears the back-off: no clock step needed
	if got := p.calls(); got != "[local data]" {
		t.Fatalf("set-ups after the report: %s", got)
	}
	if err := f.m.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatal(err)
	}

	f.m.RemovePod(pod.UID)
	f.reconcile()
	if got := f.m.VolumesInUse(); len(got) != 0 {
		t.Fatalf("VolumesInUse after the tear-down = %v", got)
	}
}

// TestPendingAndStepErrors: a PendingError is retried within two seconds
// and records no event; a StepError names its step and volume in the
// FailedMount event.
func TestPendingAndStepErrors(t *testing.T) {
	p := &attachablePlugin{waitErr: &volumemgr.PendingError{Err: errors.New("Volume not attached according to node status")}} //nolint:staticcheck // upstream's wording
	f := newFixture(t, func(c *volumemgr.Config) { c.Plugins = []volumemgr.Plugin{p} })
	pod := testPod("db", hostPathVolume("local", "/attach/local"))
	f.m.AddPod(pod)
	for range 8 { // back-off 0.5, 1, 2, 2, ... s
		f.step(2 * time.Second)
	}
	if ev := f.events.all(); len(ev) != 0 {
		t.Fatalf("events of a pending set-up: %q", ev)
	}
	p.mu.Lock()
	p.waitErr = &volumemgr.StepError{Step: "MountVolume.WaitForAttach", Volume: "pv-1", Err: errors.New("volume h is not attached for volume attachment csi-1")}
	p.mu.Unlock()
	f.step(2 * time.Second)
	want := `Warning FailedMount MountVolume.WaitForAttach failed for volume "pv-1" : volume h is not attached for volume attachment csi-1`
	if ev := f.events.all(); len(ev) != 1 || ev[0] != want {
		t.Fatalf("events %q, want %q", ev, want)
	}
	p.mu.Lock()
	p.waitErr = nil
	p.mu.Unlock()
	f.step(5 * time.Second) // a FailedMount doubles the back-off
	if got := p.calls(); got != "[local]" {
		t.Fatalf("set-ups %s", got)
	}
}

// TestBackoffAfterAttachWait: the back-off of a set-up that failed once
// the volume passed the wait on its attachment starts at 500 ms, whatever
// the waiting's retries grew to, as upstream's mount operation has its
// own back-off.
func TestBackoffAfterAttachWait(t *testing.T) {
	p := &attachablePlugin{}
	f := newFixture(t, func(c *volumemgr.Config) { c.Plugins = []volumemgr.Plugin{p} })
	pod := testPod("db", hostPathVolume("data", "/attach/ctl/disk1"))
	f.m.AddPod(pod)
	for range 6 { // waiting on volumesInUse: back-off 0.5, 1, 2, 2 ... s
		f.step(2 * time.Second)
	}
	p.mu.Lock()
	p.waitErr = errors.New("rpc error: code = Internal desc = no")
	p.mu.Unlock()
	f.m.MarkVolumesAsReportedInUse([]v1.UniqueVolumeName{"example.com/attach^/attach/ctl/disk1"})
	f.reconcile()
	if ev := f.events.all(); len(ev) != 1 {
		t.Fatalf("events after the failed set-up: %q, want one FailedMount", ev)
	}
	p.mu.Lock()
	p.waitErr = nil
	p.mu.Unlock()
	f.step(600 * time.Millisecond)
	if got := p.calls(); got != "[data]" {
		t.Fatalf("set-ups 600 ms after the first failure: %s, want data retried after 500 ms", got)
	}
}

// TestVolumesInUseAfterRestart: an attachable volume found on disk at
// start-up is named by its plugin and stays in VolumesInUse until it is
// torn down.
func TestVolumesInUseAfterRestart(t *testing.T) {
	p := &attachablePlugin{}
	f := newFixture(t, func(c *volumemgr.Config) { c.Plugins = []volumemgr.Plugin{p} })
	pod := testPod("db", hostPathVolume("data", "/attach/ctl/disk1"))
	f.m.MarkVolumesAsReportedInUse([]v1.UniqueVolumeName{"example.com/attach^/attach/ctl/disk1"})
	f.mount(pod)

	f.m = f.restart()
	if f.m.StatesSynced() {
		t.Fatal("StatesSynced before the first Reconcile")
	}
	f.reconcile()
	if got := fmt.Sprint(f.m.VolumesInUse()); got != "[example.com/attach^/attach/ctl/disk1]" {
		t.Fatalf("VolumesInUse after the restart = %s", got)
	}
	f.m.RemovePod(pod.UID)
	f.reconcile()
	if got := f.m.VolumesInUse(); len(got) != 0 {
		t.Fatalf("VolumesInUse after the tear-down = %v", got)
	}
}
