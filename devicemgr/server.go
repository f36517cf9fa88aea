package devicemgr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// maxSocketPath is the longest unix socket path Linux accepts.
const maxSocketPath = 107

// Start creates the device plugin directory, removes the sockets left in
// it (plugins watch for the registration socket to be recreated and then
// register again, as with upstream kubelet), and serves the registration
// socket in the background until Stop is called or ctx is done. Plugin
// connections live as long. It returns once the socket accepts
// registrations.
func (m *Manager) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	m.startMu.Lock()
	defer m.startMu.Unlock()
	if len(m.socket) > maxSocketPath {
		return fmt.Errorf("devicemgr: the registration socket path %s is %d bytes long, more than unix sockets allow (%d)", m.socket, len(m.socket), maxSocketPath)
	}
	m.mu.Lock()
	running := m.run != nil
	m.mu.Unlock()
	if running {
		return errors.New("devicemgr: already started")
	}
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return fmt.Errorf("devicemgr: create the device plugin directory: %w", err)
	}
	if err := m.removeSockets(ctx); err != nil {
		return fmt.Errorf("devicemgr: clean up the device plugin directory: %w", err)
	}
	ln, err := net.Listen("unix", m.socket)
	if err != nil {
		return fmt.Errorf("devicemgr: listen on the registration socket: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, &registrar{m: m})
	r := &run{srv: srv, done: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.wg.Add(1)
	m.mu.Lock()
	m.run = r
	m.mu.Unlock()
	go func() {
		defer r.wg.Done()
		if err := srv.Serve(ln); err != nil {
			logger.Error(err, "Device plugin registration server failed")
		}
	}()
	context.AfterFunc(r.ctx, func() { m.stop(r) })
	logger.V(2).Info("Device plugin registration server started", "socket", m.socket)
	return nil
}

// Run is Start, then blocks until ctx is done and stops. It returns nil
// after a clean stop, or Start's error.
func (m *Manager) Run(ctx context.Context) error {
	if err := m.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	m.Stop()
	return nil
}

// Stop stops the registration server and disconnects every plugin, whose
// devices become unhealthy, as upstream. It waits for the connections to
// end. It is idempotent.
func (m *Manager) Stop() {
	m.mu.Lock()
	r := m.run
	if r == nil {
		r = m.last
	}
	m.mu.Unlock()
	if r != nil {
		m.stop(r)
	}
}

// stop stops run r if it is still running, else waits until it stopped.
func (m *Manager) stop(r *run) {
	m.mu.Lock()
	if m.run != r {
		m.mu.Unlock()
		<-r.done
		return
	}
	m.run, m.last = nil, r
	var eps []*endpoint
	for _, rs := range m.resources {
		if rs.ep != nil {
			eps = append(eps, rs.ep)
		}
	}
	m.mu.Unlock()
	r.cancel()
	r.srv.Stop()
	for _, ep := range eps {
		ep.close()
	}
	r.wg.Wait()
	close(r.done)
}

// removeSockets removes every socket in the directory but the checkpoint.
func (m *Manager) removeSockets(ctx context.Context) error {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		p := filepath.Join(m.dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).V(4).Info("Removed stale socket", "path", p)
	}
	return errors.Join(errs...)
}

// registrar is the Registration service on the registration socket.
type registrar struct {
	pluginapi.UnsafeRegistrationServer
	m *Manager
}

// Register validates the request, connects to the plugin, and starts
// watching its devices. A plugin registering a resource that another
// connection serves replaces it.
func (r *registrar) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	ctx = klog.NewContext(ctx, r.m.logger)
	if err := r.m.register(ctx, req); err != nil {
		r.m.logger.Error(err, "Device plugin registration failed", "resource", req.GetResourceName(), "endpoint", req.GetEndpoint())
		return &pluginapi.Empty{}, err
	}
	return &pluginapi.Empty{}, nil
}

// validateRegistration checks a registration request; the error says
// what is wrong, in upstream's words where upstream has them.
func validateRegistration(dir string, req *pluginapi.RegisterRequest) error {
	supported := false
	for _, v := range pluginapi.SupportedVersions {
		supported = supported || req.GetVersion() == v
	}
	if !supported {
		return fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", req.GetVersion(), pluginapi.SupportedVersions)
	}
	if why := extendedResourceNameError(req.GetResourceName()); why != "" {
		return fmt.Errorf("the ResourceName %q is invalid: %s", req.GetResourceName(), why)
	}
	ep := req.GetEndpoint()
	if ep == "" || ep == "." || ep == ".." || strings.ContainsAny(ep, `/\`) || ep == SocketName || ep == CheckpointName {
		return fmt.Errorf("the Endpoint %q is invalid: it must be the name of the plugin's socket file in %s", ep, dir)
	}
	return nil
}

// extendedResourceNameError says why name is not an extended resource
// name (upstream's IsExtendedResourceName), or "" when it is one.
func extendedResourceNameError(name string) string {
	switch {
	case name == "":
		return "it is empty"
	case !strings.Contains(name, "/"):
		return "it is a native resource name; a device plugin resource is an extended resource name such as example.com/foo"
	case strings.Contains(name, v1.ResourceDefaultNamespacePrefix):
		return "the kubernetes.io/ domain is reserved for native resources; use your own domain, such as example.com/foo"
	case strings.HasPrefix(name, v1.DefaultResourceRequestsPrefix):
		return "extended resource names may not start with " + v1.DefaultResourceRequestsPrefix
	}
	if errs := validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix + name); len(errs) > 0 {
		return strings.Join(errs, "; ")
	}
	return ""
}

// register handles one registration.
func (m *Manager) register(ctx context.Context, req *pluginapi.RegisterRequest) error {
	logger := klog.FromContext(ctx)
	if err := validateRegistration(m.dir, req); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	name := req.ResourceName
	logger.Info("Got registration request from device plugin", "resource", name, "endpoint", req.Endpoint)

	m.regMu.Lock()
	defer m.regMu.Unlock()
	ep, err := connect(ctx, name, filepath.Join(m.dir, req.Endpoint))
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}

	m.mu.Lock()
	r := m.run
	if r == nil {
		m.mu.Unlock()
		ep.close()
		return status.Error(codes.Unavailable, "the device manager is stopping")
	}
	streamCtx, cancel := context.WithCancel(r.ctx)
	ep.cancel = cancel
	rs := m.resourceFor(name)
	old := rs.ep
	rs.ep, rs.stopped = ep, time.Time{}
	if rs.expiry != nil {
		rs.expiry.Stop()
		rs.expiry = nil
	}
	r.wg.Add(1)
	m.mu.Unlock()

	if old != nil {
		logger.V(2).Info("Device plugin replaced by a new registration", "resource", name, "old", old.socket, "new", ep.socket)
		old.close()
	}
	go m.watch(klog.NewContext(streamCtx, logger), ep, &r.wg)
	logger.V(2).Info("Device plugin connected", "resource", name, "socket", ep.socket)
	m.notify()
	return nil
}

// watch follows the plugin's ListAndWatch stream until it ends, then
// marks the plugin gone (unless it has been replaced).
func (m *Manager) watch(ctx context.Context, ep *endpoint, wg *sync.WaitGroup) {
	defer wg.Done()
	logger := klog.FromContext(ctx)
	stream, err := ep.client.ListAndWatch(ctx, &pluginapi.Empty{})
	for err == nil {
		var resp *pluginapi.ListAndWatchResponse
		if resp, err = stream.Recv(); err == nil {
			m.updateDevices(ctx, ep, resp.GetDevices())
		}
	}
	if ctx.Err() == nil {
		logger.Error(err, "ListAndWatch ended unexpectedly for device plugin", "resource", ep.resource)
	}
	ep.close()
	m.mu.Lock()
	rs := m.resources[ep.resource]
	current := rs != nil && rs.ep == ep && rs.stopped.IsZero()
	if current {
		m.markStopped(rs)
	}
	m.mu.Unlock()
	if current {
		logger.V(2).Info("Device plugin disconnected, its devices are unhealthy", "resource", ep.resource, "gracePeriod", m.grace)
		m.notify()
	}
}

// updateDevices replaces the devices of ep's resource with a ListAndWatch
// answer and writes the checkpoint.
func (m *Manager) updateDevices(ctx context.Context, ep *endpoint, devs []*pluginapi.Device) {
	logger := klog.FromContext(ctx)
	m.mu.Lock()
	rs := m.resources[ep.resource]
	if rs == nil || rs.ep != ep {
		m.mu.Unlock()
		return
	}
	old := rs.devices
	rs.devices = make(map[string]*pluginapi.Device, len(devs))
	rs.healthy, rs.unhealthy = sets.New[string](), sets.New[string]()
	var pods []string
	for _, d := range devs {
		if d.GetID() == "" {
			logger.Error(nil, "Device plugin reported a device without an ID; ignored", "resource", ep.resource)
			continue
		}
		if o, ok := old[d.ID]; !ok || o.Health != d.Health {
			// A new device may be one that was gone a while and is still
			// held by a pod: its pod is told too, as upstream.
			pods = append(pods, m.pods.holders(ep.resource, d.ID)...)
		}
		rs.devices[d.ID] = d
		if d.Health == pluginapi.Healthy {
			rs.healthy.Insert(d.ID)
		} else {
			rs.unhealthy.Insert(d.ID)
		}
	}
	healthy := rs.healthy.Len()
	m.mu.Unlock()
	m.healthChanged(pods)
	logger.V(2).Info("Processed device updates for resource", "resource", ep.resource, "total", len(devs), "healthy", healthy)
	if err := m.persist(); err != nil {
		logger.Error(err, "Failed to write the device manager checkpoint")
	}
	m.notify()
}
