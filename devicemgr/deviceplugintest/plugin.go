package deviceplugintest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DefaultEnv is the variable the default Allocate answer sets to the
// comma-separated device IDs.
const DefaultEnv = "FAKE_DEVICES"

// Config describes a fake plugin. Resource and Dir are required.
type Config struct {
	// Resource is the extended resource name, such as example.com/foo.
	Resource string
	// Dir is the device plugin directory holding the manager's
	// registration socket (kubelet.sock); the plugin's socket goes there.
	Dir string
	// Socket is the plugin socket's file name; default derived from
	// Resource ("example.com_foo.sock").
	Socket string
	// Devices is how many devices to serve, dev-0 ... dev-<N-1>, healthy.
	Devices int
	// Options is what GetDevicePluginOptions answers (and what Register
	// sends); nil means no options.
	Options *pluginapi.DevicePluginOptions
	// Env is the variable of the default Allocate answer; default
	// DefaultEnv.
	Env string
	// Response, when set, builds the Allocate answer for one container's
	// device IDs.
	Response func(ids []string) *pluginapi.ContainerAllocateResponse
	// Preferred, when set, answers GetPreferredAllocation; the default
	// takes mustInclude then the lowest available IDs.
	Preferred func(available, mustInclude []string, size int) []string
}

// Plugin is a running fake device plugin. Its methods are safe for
// concurrent use.
type Plugin struct {
	cfg    Config
	socket string

	mu        sync.Mutex
	devices   []*pluginapi.Device
	changed   chan struct{} // closed and replaced when devices change
	srv       *grpc.Server
	allocs    [][]string
	prestarts [][]string
}

// service is the plugin's DevicePlugin gRPC service.
type service struct {
	pluginapi.UnsafeDevicePluginServer
	*Plugin
}

var _ pluginapi.DevicePluginServer = service{}

// registrationSocket is the manager's socket name in the directory.
const registrationSocket = "kubelet.sock"

// New checks cfg and returns a stopped plugin.
func New(cfg Config) (*Plugin, error) {
	if cfg.Resource == "" || cfg.Dir == "" {
		return nil, errors.New("deviceplugintest: Config.Resource and Config.Dir are required")
	}
	if cfg.Socket == "" {
		cfg.Socket = strings.NewReplacer("/", "_").Replace(cfg.Resource) + ".sock"
	}
	if cfg.Env == "" {
		cfg.Env = DefaultEnv
	}
	p := &Plugin{cfg: cfg, socket: filepath.Join(cfg.Dir, cfg.Socket), changed: make(chan struct{})}
	for i := range cfg.Devices {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("dev-%d", i), Health: pluginapi.Healthy})
	}
	return p, nil
}

// SocketPath is the plugin's socket.
func (p *Plugin) SocketPath() string { return p.socket }

// Start serves the plugin on its socket (replacing a stale file) until
// Stop. Start after Stop serves again, as a restarted plugin would.
func (p *Plugin) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		return errors.New("deviceplugintest: already started")
	}
	if err := os.Remove(p.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", p.socket)
	if err != nil {
		return err
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, service{Plugin: p})
	go func(srv *grpc.Server) { _ = srv.Serve(ln) }(p.srv)
	return nil
}

// Stop stops serving; the manager sees the plugin go away. Idempotent.
func (p *Plugin) Stop() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Register registers the plugin with the manager's socket in Dir.
func (p *Plugin) Register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.cfg.Dir, registrationSocket),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.cfg.Socket,
		ResourceName: p.cfg.Resource,
		Options:      p.cfg.Options,
	}, grpc.WaitForReady(true))
	return err
}

// SetHealthy changes one device's health and pushes the new list to
// ListAndWatch. It reports whether the device exists.
func (p *Plugin) SetHealthy(id string, healthy bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.devices, func(d *pluginapi.Device) bool { return d.ID == id })
	if i < 0 {
		return false
	}
	h := pluginapi.Unhealthy
	if healthy {
		h = pluginapi.Healthy
	}
	p.devices[i] = &pluginapi.Device{ID: id, Health: h, Topology: p.devices[i].Topology}
	close(p.changed)
	p.changed = make(chan struct{})
	return true
}

// Allocations returns the device IDs of every container Allocate was
// asked for, in order.
func (p *Plugin) Allocations() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.allocs)
}

// PreStarts returns the device IDs of every PreStartContainer call.
func (p *Plugin) PreStarts() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.prestarts)
}

// GetDevicePluginOptions implements pluginapi.DevicePluginServer.
func (p service) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	if p.cfg.Options == nil {
		return &pluginapi.DevicePluginOptions{}, nil
	}
	return p.cfg.Options, nil
}

// ListAndWatch implements pluginapi.DevicePluginServer: the devices now,
// then again after every change, until the stream or the plugin ends.
func (p service) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		p.mu.Lock()
		devs := slices.Clone(p.devices)
		changed := p.changed
		p.mu.Unlock()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation implements pluginapi.DevicePluginServer.
func (p service) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, r := range req.ContainerRequests {
		var ids []string
		if p.cfg.Preferred != nil {
			ids = p.cfg.Preferred(r.AvailableDeviceIDs, r.MustIncludeDeviceIDs, int(r.AllocationSize))
		} else {
			ids = append(ids, r.MustIncludeDeviceIDs...)
			avail := slices.Sorted(slices.Values(r.AvailableDeviceIDs))
			for _, id := range avail {
				if len(ids) >= int(r.AllocationSize) {
					break
				}
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate implements pluginapi.DevicePluginServer.
func (p service) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, r := range req.ContainerRequests {
		ids := slices.Clone(r.DevicesIds)
		p.mu.Lock()
		for _, id := range ids {
			if !slices.ContainsFunc(p.devices, func(d *pluginapi.Device) bool { return d.ID == id }) {
				p.mu.Unlock()
				return nil, fmt.Errorf("unknown device %q", id)
			}
		}
		p.allocs = append(p.allocs, ids)
		p.mu.Unlock()
		var cr *pluginapi.ContainerAllocateResponse
		if p.cfg.Response != nil {
			cr = p.cfg.Response(ids)
		} else {
			cr = &pluginapi.ContainerAllocateResponse{Envs: map[string]string{p.cfg.Env: strings.Join(ids, ",")}}
			for _, id := range ids {
				cr.Devices = append(cr.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/fake/" + id, HostPath: "/dev/null", Permissions: "rw"})
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

// PreStartContainer implements pluginapi.DevicePluginServer.
func (p service) PreStartContainer(_ context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	p.prestarts = append(p.prestarts, slices.Clone(req.DevicesIds))
	p.mu.Unlock()
	return &pluginapi.PreStartContainerResponse{}, nil
}
