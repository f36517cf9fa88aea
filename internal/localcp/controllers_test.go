package localcp

import (
	"errors"
	"testing"
	"time"

	"github.com/nodekit/nodekit/internal/itest"
)

// TestControllersStartStopAttach starts both controllers on a detached
// control plane: they are listed by their pidfiles, adopted by Attach, and
// stopped by Stop before the API server.
func TestControllersStartStopAttach(t *testing.T) {
	requireBinaries(t)
	kcm, sched, err := ControllerBinaries("")
	var missing *MissingBinaryError
	if errors.As(err, &missing) {
		itest.Require(t, "kube-controller-manager and kube-scheduler", err)
	} else if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cp, err := Start(t.Context(), Config{Dir: dir, Detach: true, Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = StopDir(stopCtx(t), dir) })
	if err := cp.StartControllerManager(t.Context(), kcm); err != nil {
		t.Fatal(err)
	}
	if err := cp.StartScheduler(t.Context(), sched); err != nil {
		t.Fatal(err)
	}
	if err := cp.StartScheduler(t.Context(), sched); err == nil {
		t.Error("a second StartScheduler succeeded, want 'already running'")
	}
	live, err := LiveProcesses(dir)
	if err != nil || len(live) != 4 {
		t.Fatalf("LiveProcesses = %v, %v; want the scheduler, the controller manager, kube-apiserver and etcd", live, err)
	}
	att, err := Attach(t.Context(), dir)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if len(att.controllers) != 2 {
		t.Errorf("Attach adopted controllers %v, want both", att.controllers)
	}
	procs := []*proc{cp.controllers[ProcControllerManager], cp.controllers[ProcScheduler], cp.apiserver, cp.etcd}
	if err := cp.Stop(stopCtx(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, p := range procs {
		if !p.waitGone(t.Context(), 5*time.Second) {
			t.Errorf("%s (pid %d) still running after Stop", p.name, p.pid)
		}
	}
	if live, err := LiveProcesses(dir); err != nil || len(live) != 0 {
		t.Errorf("LiveProcesses after Stop = %v, %v; want none", live, err)
	}
}
