package nodekit

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// Op says what a PodUpdate means for the pods it carries.
type Op int

const (
	// SET is a full snapshot from one source: the pods listed are all the
	// source has; pods it reported before and does not list are gone.
	SET Op = iota
	// ADD introduces pods the receiver has not seen from this source.
	ADD
	// UPDATE carries pods whose spec (or another field that needs action)
	// changed.
	UPDATE
	// DELETE carries pods that are being deleted gracefully: their
	// deletionTimestamp is set and the object still exists.
	DELETE
	// REMOVE carries pods that are gone from their source.
	REMOVE
	// RECONCILE carries pods whose status or metadata changed in a way that
	// needs no action beyond bookkeeping.
	RECONCILE
)

// String returns the upstream name of the op.
func (o Op) String() string {
	switch o {
	case SET:
		return "SET"
	case ADD:
		return "ADD"
	case UPDATE:
		return "UPDATE"
	case DELETE:
		return "DELETE"
	case REMOVE:
		return "REMOVE"
	case RECONCILE:
		return "RECONCILE"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Well-known source names. A custom source picks any other short name.
const (
	SourceAPI  = "api"
	SourceFile = "file"
	SourceHTTP = "http"
	// SourceAll is used by mergers for updates that concern every source.
	SourceAll = "*"
)

// PodUpdate is one message of the pod stream. The pods are owned by the
// receiver once the update is sent: senders must not touch them afterwards.
type PodUpdate struct {
	Op     Op
	Pods   []*v1.Pod
	Source string
}

// Source produces pods for this node: the API server, a manifest directory,
// an HTTP URL, or anything a vendor brings (an MQTT topic, a local database).
type Source interface {
	// Name is the source's short, stable name ("api", "file", "http"). It is
	// stamped on every pod as kubernetes.io/config.source.
	Name() string

	// Run sends updates to out until ctx is done, then returns ctx.Err() (or
	// an earlier fatal error). It blocks for its whole life; a source with
	// nothing to report simply waits. The first update must be a SET (even an
	// empty one) as soon as the source has read its pods once, so a receiver
	// knows the source has been seen. Transient failures (an unreadable file,
	// an unreachable URL) are reported through the source's logger and do not
	// end Run: the last good pods stay in force. Run is called once.
	Run(ctx context.Context, out chan<- PodUpdate) error
}

// SourceFunc adapts a function to Source.
type SourceFunc struct {
	SourceName string
	Func       func(ctx context.Context, out chan<- PodUpdate) error
}

// Name implements Source.
func (f SourceFunc) Name() string { return f.SourceName }

// Run implements Source.
func (f SourceFunc) Run(ctx context.Context, out chan<- PodUpdate) error { return f.Func(ctx, out) }

var _ Source = SourceFunc{}
