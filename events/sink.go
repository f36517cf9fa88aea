package events

import (
	"context"
	"errors"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Sink is where a Broadcaster writes events. It must write an event into
// the event's own namespace and return the errors a client-go REST client
// returns (*apierrors.StatusError for a response from the API server), as
// the Broadcaster decides from them whether to retry. Its method set is
// client-go's record.EventSink, so kubeclient.EventSink fits both. The
// Broadcaster calls it from one goroutine, one call at a time, and never
// calls Update; the events it passes belong to the Broadcaster and must
// not be kept.
type Sink interface {
	// Create creates event and returns it as stored.
	Create(event *v1.Event) (*v1.Event, error)
	// Update replaces event and returns it as stored.
	Update(event *v1.Event) (*v1.Event, error)
	// Patch applies data, a strategic merge patch, to the stored event
	// named by oldEvent's namespace and name, and returns the result.
	Patch(oldEvent *v1.Event, data []byte) (*v1.Event, error)
}

const (
	// maxTries is how many times one event is written before it is
	// given up, as record's maxTriesPerEvent.
	maxTries = 12
	// retryInterval is the wait between two tries; the first wait is a
	// random fraction of it, so that agents do not retry in step after
	// an outage of the API server. record's defaultSleepDuration.
	retryInterval = 10 * time.Second
)

// deliver correlates one queued event and writes the result to the sink,
// retrying as record's recordToSink does. It runs on the sink goroutine,
// which owns b.corr. The queued event is shared with the logging
// goroutine, so it is copied before anything changes it.
func (b *Broadcaster) deliver(ctx context.Context, queued *v1.Event) {
	logger := b.logger
	copied := *queued
	event := &copied
	result, err := b.corr.correlate(event)
	if err != nil {
		logger.Error(err, "Event correlation failed")
	}
	if result.skip {
		return
	}
	for tries := 1; ; tries++ {
		if b.writeOnce(logger, result.event, result.patch) {
			return
		}
		if tries >= maxTries {
			logger.Error(nil, "Unable to write event (retry limit exceeded!)", "event", event)
			return
		}
		wait := retryInterval
		if tries == 1 {
			wait = time.Duration(float64(wait) * b.rand.float64())
		}
		timer := b.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			logger.Error(nil, "Unable to write event (broadcaster is shut down)", "event", event)
			return
		case <-timer.C():
		}
	}
}

// writeOnce makes one try at writing event: a patch of the stored event
// for a repeat (Count > 1), a create for a first occurrence or when the
// stored event is gone. It reports whether the event is done with,
// written or given up for good; false means try again. After a write, the
// correlator learns the stored event's name, count and resourceVersion.
func (b *Broadcaster) writeOnce(logger klog.Logger, event *v1.Event, patch []byte) bool {
	var (
		stored *v1.Event
		err    error
	)
	repeat := event.Count > 1
	if repeat {
		stored, err = b.sink.Patch(event, patch)
	}
	if !repeat || isNotFound(err) {
		event.ResourceVersion = "" // a create must not carry one
		stored, err = b.sink.Create(event)
	}
	if err == nil {
		b.corr.updateState(stored)
		return true
	}
	if final(logger, event, err) {
		return true
	}
	logger.Error(err, "Unable to write event (may retry after sleeping)", "event", event)
	return false
}

// isNotFound reports whether err is an API response with status 404, as
// record's util.IsKeyNotFoundError (by code, whatever the reason).
func isNotFound(err error) bool {
	var status *apierrors.StatusError
	return errors.As(err, &status) && status.Status().Code == http.StatusNotFound
}

// final reports whether err ends the tries of an event, and logs it if
// so: a request that could not be built will not be built better next
// time, and an answer from the API server means the event itself was
// refused. Transport errors and unexpected objects are worth another try.
func final(logger klog.Logger, event *v1.Event, err error) bool {
	var construction *rest.RequestConstructionError
	var status *apierrors.StatusError
	switch {
	case errors.As(err, &construction):
		logger.Error(err, "Unable to construct event (will not retry!)", "event", event)
		return true
	case errors.As(err, &status):
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, v1.NamespaceTerminatingCause) {
			logger.V(5).Info("Server rejected event (will not retry!)", "event", event, "err", err)
		} else {
			logger.Error(err, "Server rejected event (will not retry!)", "event", event)
		}
		return true
	}
	return false
}
