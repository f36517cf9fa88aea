package devicemgr

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// dialTimeout bounds connecting to a registering plugin, as upstream.
const dialTimeout = 10 * time.Second

// endpoint is the connection to one registered plugin.
type endpoint struct {
	resource string
	socket   string
	client   pluginapi.DevicePluginClient
	opts     *pluginapi.DevicePluginOptions
	conn     *grpc.ClientConn // nil in tests that use an in-process client

	closeOnce sync.Once
	// cancel ends the ListAndWatch stream; set by register.
	cancel context.CancelFunc
}

// connect dials the plugin's socket and asks for its options; it waits up
// to dialTimeout for the plugin to be ready.
func connect(ctx context.Context, resource, socket string) (*endpoint, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"))
	if err != nil {
		return nil, fmt.Errorf("failed to dial device plugin: %w", err)
	}
	client := pluginapi.NewDevicePluginClient(conn)
	cctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	opts, err := client.GetDevicePluginOptions(cctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("failed to get device plugin options from %s: %w", socket, err)
	}
	return &endpoint{resource: resource, socket: socket, client: client, opts: opts, conn: conn}, nil
}

// close ends the stream and the connection. It is idempotent.
func (e *endpoint) close() {
	e.closeOnce.Do(func() {
		if e.cancel != nil {
			e.cancel()
		}
		if e.conn != nil {
			_ = e.conn.Close()
		}
	})
}

func (e *endpoint) preferredAvailable() bool {
	return e.opts != nil && e.opts.GetPreferredAllocationAvailable
}

func (e *endpoint) preStartRequired() bool {
	return e.opts != nil && e.opts.PreStartRequired
}

// getPreferredAllocation asks the plugin which size devices of available
// (including mustInclude) it prefers.
func (e *endpoint) getPreferredAllocation(ctx context.Context, available, mustInclude []string, size int) ([]string, error) {
	resp, err := e.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   available,
			MustIncludeDeviceIDs: mustInclude,
			AllocationSize:       int32(size),
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %w", err)
	}
	if rs := resp.GetContainerResponses(); len(rs) > 0 {
		return rs[0].GetDeviceIDs(), nil
	}
	return nil, nil
}

// allocate asks the plugin to prepare devs for one container.
func (e *endpoint) allocate(ctx context.Context, devs []string) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := e.client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: devs}},
	})
	if err != nil {
		return nil, err
	}
	if len(resp.GetContainerResponses()) == 0 || resp.ContainerResponses[0] == nil {
		return nil, fmt.Errorf("no containers return in allocation response %v", resp)
	}
	return resp.ContainerResponses[0], nil
}

// preStartContainer tells the plugin a container with devs is starting.
func (e *endpoint) preStartContainer(ctx context.Context, devs []string) error {
	ctx, cancel := context.WithTimeout(ctx, pluginapi.KubeletPreStartContainerRPCTimeoutInSecs*time.Second)
	defer cancel()
	if _, err := e.client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: devs}); err != nil {
		return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %w", err)
	}
	return nil
}
