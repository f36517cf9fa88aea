package pleg

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
)

// PLEG is what a node agent runs of a pod lifecycle event generator;
// Generic and Evented both are one.
type PLEG interface {
	// Relist is the synchronous step: list the runtime once, refresh the
	// cache and send the events.
	Relist(ctx context.Context)
	// Run relists every RelistPeriod (and, evented, consumes container
	// events) until ctx is done.
	Run(ctx context.Context) error
	// Events is the receive-only event stream.
	Events() <-chan *Event
	// Healthy reports an error once relisting has stalled.
	Healthy() error
	// RequestRelist relists one pod at once (on-demand relist).
	RequestRelist(ctx context.Context, uid types.UID, name, namespace string)
}

var (
	_ PLEG = (*Generic)(nil)
	_ PLEG = (*Evented)(nil)
)

// New returns the PLEG for rt: the evented PLEG over a relist PLEG when rt
// streams container events (it has ContainerEventer) and opts.RelistOnly
// is not set, otherwise the relist PLEG alone, as Virtual Kubelet's pod
// controller wraps a provider without notifications in a poller. Either
// way the relist runs every RelistPeriod and writes cache.
func New(rt Runtime, cache *Cache, opts Options) PLEG {
	g := NewGeneric(rt, cache, opts)
	if ev, ok := rt.(ContainerEventer); ok && !opts.RelistOnly {
		return NewEvented(g, ev)
	}
	return g
}

// Relist is the Generic's synchronous step: the evented PLEG's events are
// consumed only by Run.
func (e *Evented) Relist(ctx context.Context) { e.g.Relist(ctx) }

// RequestRelist is the Generic's: the pod is relisted at once.
func (e *Evented) RequestRelist(ctx context.Context, uid types.UID, name, namespace string) {
	e.g.RequestRelist(ctx, uid, name, namespace)
}
