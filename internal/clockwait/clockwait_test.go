package clockwait_test

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/internal/clockwait"
)

func TestSleep(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	done := make(chan bool, 1)
	go func() { done <- clockwait.Sleep(t.Context(), clk, time.Minute) }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Minute)
	if !<-done {
		t.Error("Sleep reported false after its time passed")
	}
	if clk.HasWaiters() {
		t.Error("Sleep left its timer on the clock")
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if clockwait.Sleep(ctx, clk, time.Minute) {
		t.Error("Sleep reported true with its context done")
	}
	if clk.HasWaiters() {
		t.Error("Sleep left its timer on the clock after its context ended")
	}
}
