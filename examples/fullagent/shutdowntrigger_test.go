package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodekit/nodekit/shutdown"
	"github.com/nodekit/nodekit/shutdown/logind"
)

// Without a system bus, logind cannot be watched: the error is logged,
// the signal still reports shutdowns, and Release does not touch logind.
func TestShutdownTriggerWithoutLogind(t *testing.T) {
	tr := &nodeShutdownTrigger{
		logind: logind.New(logind.Config{BusAddress: "unix:path=" + filepath.Join(t.TempDir(), "no-bus"), GracePeriod: time.Minute}),
		signal: shutdown.SignalTrigger(syscall.SIGUSR2),
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events, err := tr.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch = %v; a missing logind must not fail it", err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-events:
		if !v {
			t.Fatal("the signal reported a cancellation")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no shutdown reported for the signal")
	}
	if err := tr.Release(ctx); err != nil {
		t.Errorf("Release after a signalled shutdown: %v", err)
	}
	if tr.logind.Holding() {
		t.Error("a logind lock is held with no bus")
	}
	cancel()
	if _, ok := <-events; ok {
		t.Error("the channel is not closed once ctx ends")
	}
}
