package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// line is one JSON line: a pod's new status, or its final deletion.
type line struct {
	Namespace string        `json:"namespace"`
	Name      string        `json:"name"`
	UID       types.UID     `json:"uid"`
	Deleted   bool          `json:"deleted,omitempty"`
	Status    *v1.PodStatus `json:"status,omitempty"`
}

// jsonSink is a nodekit.StatusSink that writes each published pod status as
// one JSON line. It is the shape of any sink that ships statuses elsewhere
// (an MQTT topic per pod, an HTTP POST): encode, send, report the error. The
// status manager retries a failed write with the newest status and may send
// the same status again (on resync); the sink skips a status identical to
// the last one it wrote for the pod. Safe for concurrent use.
type jsonSink struct {
	mu   sync.Mutex
	w    io.Writer
	last map[types.UID][]byte
}

var _ nodekit.StatusSink = (*jsonSink)(nil)

func newJSONSink(w io.Writer) *jsonSink {
	return &jsonSink{w: w, last: map[types.UID][]byte{}}
}

// SetPodStatus writes the status. pod and status are only read, and not
// kept after the call (the contract: they are the caller's).
func (s *jsonSink) SetPodStatus(_ context.Context, pod *v1.Pod, status *v1.PodStatus) error {
	b, err := json.Marshal(line{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Status: status})
	if err != nil {
		return fmt.Errorf("encode status of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if bytes.Equal(s.last[pod.UID], b) {
		return nil // a resync of what was already sent
	}
	if _, err := s.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write status of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	s.last[pod.UID] = b
	return nil
}

// DeletePod writes the pod's deletion and forgets it.
func (s *jsonSink) DeletePod(_ context.Context, pod *v1.Pod) error {
	b, err := json.Marshal(line{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Deleted: true})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write deletion of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	delete(s.last, pod.UID)
	return nil
}
