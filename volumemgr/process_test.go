package volumemgr_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nodekit/nodekit/volumemgr"
)

// TestProcessError: a set-up failing with a ProcessError records no
// FailedMount event; WaitForAttachAndMount fails at once naming the
// volume among "failed to process volumes", with upstream's shape; the
// set-up is retried within two seconds and then the wait succeeds.
func TestProcessError(t *testing.T) {
	p := &attachablePlugin{waitErr: &volumemgr.ProcessError{Err: errors.New("error processing PVC default/claim: PVC is not bound")}}
	f := newFixture(t, func(c *volumemgr.Config) { c.Plugins = []volumemgr.Plugin{p} })
	pod := testPod("db", hostPathVolume("data", "/attach/local"))
	f.m.AddPod(pod)
	f.reconcile()
	if ev := f.events.all(); len(ev) != 0 {
		t.Fatalf("events of a volume not processed: %q", ev)
	}
	// At once, not after the mount timeout: the context is live.
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	err := f.m.WaitForAttachAndMount(ctx, pod)
	want := "unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC default/claim: PVC is not bound"
	if err == nil || err.Error() != want {
		t.Fatalf("WaitForAttachAndMount = %v, want %q", err, want)
	}
	p.mu.Lock()
	p.waitErr = nil
	p.mu.Unlock()
	for range 3 { // back-off 0.5, 1, 2 s at most
		f.step(2 * time.Second)
	}
	if err := f.m.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatalf("WaitForAttachAndMount after the volume was processed: %v", err)
	}
	if got := p.calls(); got != "[data]" {
		t.Errorf("set-ups %s", got)
	}
}
