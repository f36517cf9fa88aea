package criruntime

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit"
)

// ContainerEvents streams the runtime's container events (CRI
// GetContainerEvents) to out until ctx ends or the stream breaks, and
// returns why it stopped. A runtime without the call (containerd 1.6)
// fails at once; callers fall back to relisting.
func (r *Runtime) ContainerEvents(ctx context.Context, out chan<- nodekit.ContainerEvent) error {
	ch := make(chan *runtimeapi.ContainerEventResponse, 100)
	errc := make(chan error, 1)
	go func() { errc <- r.rs.GetContainerEvents(ctx, ch, nil) }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return fmt.Errorf("criruntime: container event stream: %w", err)
		case ev := <-ch:
			e := nodekit.ContainerEvent{
				PodID:     types.UID(ev.GetPodSandboxStatus().GetMetadata().GetUid()),
				Container: r.containerID(ev.ContainerId),
				Time:      nanoTime(ev.CreatedAt),
			}
			switch ev.ContainerEventType {
			case runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT:
				e.Type = nodekit.ContainerCreatedEvent
			case runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT:
				e.Type = nodekit.ContainerStartedEvent
			case runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT:
				e.Type = nodekit.ContainerStoppedEvent
			case runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT:
				e.Type = nodekit.ContainerDeletedEvent
			default:
				continue
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}
