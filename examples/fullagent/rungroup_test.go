package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestRunGroup: the first failing part cancels the others and is wait's
// error, and wait returns only after every part has returned.
func TestRunGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRunGroup(t.Context())
		var stopped atomic.Int32
		for _, name := range []string{"a", "b"} {
			g.start(name, func(ctx context.Context) error {
				<-ctx.Done()
				time.Sleep(time.Second) // a part slow to stop (fake time in the bubble)
				stopped.Add(1)
				return ctx.Err()
			})
		}
		boom := errors.New("boom")
		g.start("failing", func(context.Context) error { return boom })
		err := g.wait()
		if !errors.Is(err, boom) || err.Error() != "failing: boom" {
			t.Errorf("wait() = %v, want failing: boom", err)
		}
		if n := stopped.Load(); n != 2 {
			t.Errorf("wait returned with %d of 2 parts stopped", n)
		}
		if r := g.stillRunning(); len(r) != 0 {
			t.Errorf("still running after wait: %v", r)
		}
	})
}

// TestRunGroupStop: stop ends the group with its cause; parts ending with
// context.Canceled are not errors.
func TestRunGroupStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRunGroup(t.Context())
		g.start("part", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		ended := errors.New("sync loop ended")
		g.stop(ended)
		if err := g.wait(); !errors.Is(err, ended) {
			t.Errorf("wait() = %v, want %v", err, ended)
		}
	})
}
