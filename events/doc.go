// Package events records Kubernetes events (core/v1 Event) for a node
// agent: a Recorder builds an event for an object and queues it, and a
// Broadcaster logs each queued event and writes it to a Sink (the API
// server's events resource; kubeclient.EventSink is one) after
// correlating it with the events before it. It owns the events from the
// moment a Recorder is called until the Sink returns; it does not own the
// Sink, its client or its rate limits.
//
// It behaves as client-go's k8s.io/client-go/tools/record (v0.37.2) set up
// the way kubelet v1.37 sets it up: NewBroadcaster(WithContext(ctx)),
// StartRecordingToSink, StartStructuredLogging(3) and a recorder with
// source {Component: "kubelet", Host: node}. What it keeps identical: the
// event a recorder builds (name, namespace, reference, timestamps, count,
// source, reporting controller and instance); the types it accepts; the
// correlator with its default options (aggregation of similar events,
// counting of repeated ones, the per-object spam filter, their cache sizes,
// keys, thresholds and quirks); the strategic merge patch bytes sent for a
// repeated event; the calls to the sink, which errors end a write and how
// often and how long it retries; the structured log line at verbosity 3.
// *Recorder satisfies record.EventRecorder and anything satisfying Sink
// satisfies record.EventSink, so either side can be swapped for client-go's.
//
// Why it exists: record imports k8s.io/apimachinery's strategicpatch (for
// the one patch it builds, see below), and strategicpatch links
// kube-openapi, gnostic, yaml v3 and about 45 other packages, about
// 1.5 MiB of code and 0.25 MB of heap at start-up, none of which a node
// agent uses. This package imports none of record, tools/reference,
// record/util or strategicpatch. The patch a repeated event needs changes
// top-level fields only (count, lastTimestamp, message), and a two-way
// strategic merge patch of such a change is a JSON merge patch of those
// fields; the tests compare the bytes with strategicpatch's.
//
// Where it differs, on purpose: every log line (including a recorder's
// errors, which record sends to the global klog logger) goes to the
// logger of the context given to NewBroadcaster; time is read from an
// injected clock (record's recorder reads the wall clock) and randomness
// from an injected source; a recorder given a typed nil object logs and
// drops it where record panics; sink errors are classified with errors.As,
// so a wrapped API error is treated as the unwrapped one; the queue feeds
// the logger and the sink directly, each through its own bounded queue of
// record's length (record puts a shared queue of the same length before
// them), and a recorder logs when either is full, where record drops
// silently at that point; Shutdown waits for in-flight work and drops
// the events still queued.
//
// Usage, as kubelet:
//
//	b := events.NewBroadcaster(ctx, kubeclient.EventSink(ctx, client))
//	defer b.Shutdown()
//	recorder := b.NewRecorder(scheme, v1.EventSource{Component: "kubelet", Host: nodeName})
//	recorder.Eventf(pod, v1.EventTypeNormal, "Pulled", "Image %q pulled", image)
package events
