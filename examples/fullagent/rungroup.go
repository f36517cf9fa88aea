package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// runGroup runs the agent's parts, each on a goroutine of its own: the
// first part to fail cancels the group's context, which every part
// stops on, and wait returns only once every part has returned, so the
// runtime is closed after its last user (the Merger.Run pattern of
// package podconfig).
type runGroup struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running map[string]int // parts not yet returned, by name
}

// newRunGroup returns a group whose parts run under a child of ctx.
func newRunGroup(ctx context.Context) *runGroup {
	g := &runGroup{running: map[string]int{}}
	g.ctx, g.cancel = context.WithCancelCause(ctx)
	return g
}

// start runs f in the group under name. An error other than
// context.Canceled ends the group, and is wait's error, named.
func (g *runGroup) start(name string, f func(context.Context) error) {
	g.mu.Lock()
	g.running[name]++
	g.mu.Unlock()
	g.wg.Go(func() {
		defer g.done(name)
		if err := f(g.ctx); err != nil && !errors.Is(err, context.Canceled) {
			g.cancel(fmt.Errorf("%s: %w", name, err))
		}
	})
}

func (g *runGroup) done(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running[name]--; g.running[name] == 0 {
		delete(g.running, name)
	}
}

// stop ends the group with cause (nil: context.Canceled) unless a part
// ended it first.
func (g *runGroup) stop(cause error) { g.cancel(cause) }

// wait blocks until the group's context is done (a part failed, stop, or
// the parent's context ended), then until every part has returned,
// logging every 10 s the parts still running. It returns the cause: the
// first part's error, stop's cause, or the parent context's error.
func (g *runGroup) wait() error {
	<-g.ctx.Done()
	finished := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(finished)
	}()
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-finished:
			return context.Cause(g.ctx)
		case <-t.C:
			klog.FromContext(g.ctx).Info("Waiting for the agent's parts to stop", "running", g.stillRunning())
		}
	}
}

// stillRunning names the parts that have not returned, sorted.
func (g *runGroup) stillRunning() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.running))
	for name := range g.running {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
