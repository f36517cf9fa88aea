package criruntime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// sandboxTurnHold is how long a sandbox creation counts against
// Config.MaxParallelSandboxCreations. A call still in progress after it
// goes on without its turn, so one hung in a CNI plugin keeps the others
// waiting this long at most, not for the whole RequestTimeout.
const sandboxTurnHold = 5 * time.Second

// sandboxGate bounds the sandbox creations in progress at once. The zero
// gate (no turns) and a nil one let every caller through.
type sandboxGate struct {
	turns chan struct{}
	clock clock.WithDelayedExecution
}

// checkMaxSandboxCreations refuses a negative Config.MaxParallelSandboxCreations.
func checkMaxSandboxCreations(max int) error {
	if max < 0 {
		return fmt.Errorf("criruntime: MaxParallelSandboxCreations is %d; want 0 (no limit) or more", max)
	}
	return nil
}

// newSandboxGate is a gate of max turns (0: no limit, and max has been
// checked); a turn is given back sandboxTurnHold after it was taken even
// when its caller is still in progress, on clk's timers.
func newSandboxGate(max int, clk clock.WithDelayedExecution) *sandboxGate {
	g := &sandboxGate{clock: clk}
	if max > 0 {
		g.turns = make(chan struct{}, max)
	}
	return g
}

// enter waits for a turn until ctx ends. Waiting callers get turns first
// come, first served, as the Go runtime queues a channel's blocked
// senders (the language does not promise it). leave gives the turn back;
// it must be called once the creation is over, and may be called after
// the hold gave the turn back already.
func (g *sandboxGate) enter(ctx context.Context) (leave func(), err error) {
	if g == nil || g.turns == nil {
		return func() {}, nil
	}
	select {
	case g.turns <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a turn to create the sandbox: %w", context.Cause(ctx))
	}
	var once sync.Once
	giveBack := func() { once.Do(func() { <-g.turns }) }
	t := g.clock.AfterFunc(sandboxTurnHold, giveBack)
	return func() {
		t.Stop()
		giveBack()
	}, nil
}
