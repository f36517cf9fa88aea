package shutdown

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Trigger tells the manager when the node is about to shut down: a
// systemd-logind watcher (delay inhibitor lock plus PrepareForShutdown) or
// a signal (SignalTrigger).
type Trigger interface {
	// Watch starts watching. The channel receives true when a shutdown
	// begins and false when one announced earlier is cancelled
	// (PrepareForShutdown(false)); it is closed once ctx is done. A
	// trigger whose source can drop (the system bus) reconnects inside
	// Watch rather than closing the channel early.
	Watch(ctx context.Context) (<-chan bool, error)
}

// Releaser is an optional Trigger capability: Run calls Release once
// Shutdown has finished with the pods, so the system may go on shutting
// down (a logind trigger closes its delay inhibitor lock, and takes a new
// one when the shutdown is cancelled).
type Releaser interface {
	Release(ctx context.Context) error
}

// Run watches t and, on each shutdown it reports, calls Shutdown and then
// t's Release (when t is a Releaser); a cancellation marks the node no
// longer shutting down. With no groups configured, graceful shutdown is
// disabled: Run does not watch t and only waits for ctx. Run returns ctx's
// error, or an error if t cannot watch or stops watching early.
func (m *Manager) Run(ctx context.Context, t Trigger) error {
	if len(m.groups) == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	if t == nil {
		return errors.New("shutdown: Run needs a Trigger")
	}
	logger := klog.FromContext(ctx)
	m.loadRecorded(ctx)
	events, err := t.Watch(ctx)
	if err != nil {
		return fmt.Errorf("shutdown: watch for node shutdown: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case begins, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("shutdown: the trigger stopped watching for node shutdown")
			}
			if !begins {
				logger.Info("Shutdown manager: node shutdown cancelled")
				m.event("Shutdown manager detected shutdown cancellation")
				m.setShuttingDown(false)
				continue
			}
			logger.Info("Shutdown manager: node shutdown detected")
			m.event("Shutdown manager detected shutdown event")
			if err := m.Shutdown(ctx); err != nil {
				return err
			}
			if r, ok := t.(Releaser); ok {
				if err := r.Release(ctx); err != nil {
					logger.Error(err, "Shutdown manager: failed to release the shutdown trigger")
				}
			}
		}
	}
}

func (m *Manager) event(msg string) {
	if m.cfg.Events != nil && m.cfg.NodeRef != nil {
		m.cfg.Events.Eventf(m.cfg.NodeRef, v1.EventTypeNormal, EventReason, "%s", msg)
	}
}

// SignalTrigger is a Trigger that reports a shutdown each time the process
// receives sig. From Watch on, sig no longer has its default effect
// (SIGPWR would end the process). It never reports a cancellation.
//
// The reference agent uses SIGPWR: send SIGPWR to the agent to simulate a
// system shutdown (pods are stopped, the node turns NotReady and rejects
// new pods, the agent keeps running); SIGTERM/SIGINT only stop the agent
// and leave pods running.
func SignalTrigger(sig os.Signal) Trigger { return signalTrigger{sig: sig} }

type signalTrigger struct{ sig os.Signal }

func (s signalTrigger) Watch(ctx context.Context) (<-chan bool, error) {
	if s.sig == nil {
		return nil, errors.New("shutdown: SignalTrigger needs a signal")
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, s.sig)
	out := make(chan bool, 1)
	go func() {
		defer close(out)
		defer signal.Stop(sigs)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
				select {
				case out <- true:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
