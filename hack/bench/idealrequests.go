package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// tokenSeconds is the lifetime kubelet asks for a service account volume's
// token: the admission plugin's 3607 s.
const tokenSeconds = 3607

// kubeletRequests makes, for each pod the ideal agent settles, the
// requests kubelet makes for such a pod on the bench's workload (one
// container, its image present, the service account volume the
// ServiceAccount admission plugin adds): a token request bound to the pod
// before the status write, as kubelet needs the token to mount the volume
// before it starts anything, and the container's three events after it.
// The events are queued and written one at a time by writeEvents, as
// kubelet's event broadcaster writes them, so none holds up a status
// write. A nil *kubeletRequests makes none of them.
type kubeletRequests struct {
	// client makes the token requests; eventClient writes the events
	// (kubelet writes them through a client of their own, limited apart).
	client, eventClient kubernetes.Interface
	source              v1.EventSource
	events              chan *v1.Event
}

func newKubeletRequests(client, eventClient kubernetes.Interface, node string) *kubeletRequests {
	return &kubeletRequests{client: client, eventClient: eventClient, source: v1.EventSource{Component: "kubelet", Host: node},
		events: make(chan *v1.Event, 4096)}
}

// settle is the package's settle with r's requests around it.
func (r *kubeletRequests) settle(ctx context.Context, client kubernetes.Interface, p *v1.Pod, hostIP, podIP string) error {
	if r == nil || p.DeletionTimestamp != nil {
		return settle(ctx, client, p, hostIP, podIP)
	}
	if err := r.token(ctx, p); err != nil {
		return err
	}
	if err := settle(ctx, client, p, hostIP, podIP); err != nil {
		return err
	}
	for _, c := range p.Spec.Containers {
		r.queue(ctx, p, "Pulled", fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", c.Image))
		r.queue(ctx, p, "Created", "Created container: "+c.Name)
		r.queue(ctx, p, "Started", "Started container "+c.Name)
	}
	return nil
}

// tokenRetry is how long token waits before asking again after a failed
// request: the API server can answer a request bound to a pod it has just
// created with NotFound, and kubelet then retries the volume's set-up.
const tokenRetry = 100 * time.Millisecond

// token asks for the token of the pod's service account volume, bound to
// the pod, as kubelet's token manager does for a pod it has not seen,
// until it gets one or ctx ends.
func (r *kubeletRequests) token(ctx context.Context, p *v1.Pod) error {
	for {
		err := r.tokenOnce(ctx, p)
		if err == nil || ctx.Err() != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "ideal agent: pod %s/%s: %v; retrying in %v\n", p.Namespace, p.Name, err, tokenRetry)
		if err := sleep(ctx, tokenRetry); err != nil {
			return err
		}
	}
}

func (r *kubeletRequests) tokenOnce(ctx context.Context, p *v1.Pod) error {
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		ExpirationSeconds: new(int64(tokenSeconds)),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	}}
	_, err := r.client.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token request: %w", err)
	}
	return nil
}

// queue builds a Normal event about the pod, as kubelet's recorder does,
// and hands it to writeEvents.
func (r *kubeletRequests) queue(ctx context.Context, p *v1.Pod, reason, message string) {
	now := metav1.Now()
	ev := &v1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", p.Name, rand.Uint64()), Namespace: p.Namespace},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name,
			UID: p.UID, ResourceVersion: p.ResourceVersion},
		Reason: reason, Message: message, Source: r.source, FirstTimestamp: now, LastTimestamp: now, Count: 1,
		Type: v1.EventTypeNormal, ReportingController: r.source.Component, ReportingInstance: r.source.Host,
	}
	select {
	case r.events <- ev:
	case <-ctx.Done():
	}
}

// writeEvents writes the queued events one at a time until ctx ends.
func (r *kubeletRequests) writeEvents(ctx context.Context) {
	for {
		select {
		case ev := <-r.events:
			if _, err := r.eventClient.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "ideal agent: event %s: %v\n", ev.Name, err)
			}
		case <-ctx.Done():
			return
		}
	}
}
