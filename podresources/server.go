package podresources

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
	"k8s.io/utils/clock"
)

// Upstream's socket name and rate limit (podresources/constants.go).
const (
	SocketName   = "kubelet.sock"
	DefaultQPS   = 100
	DefaultBurst = 10
)

// ErrLimitExceeded is the answer to a request past the rate limit, as
// upstream's.
var ErrLimitExceeded = status.Error(codes.ResourceExhausted, "rejected by rate limit")

// PodLister gives the active pods: admitted, neither terminal nor fully
// terminated.
type PodLister interface {
	ActivePods() []*v1.Pod
}

// CPUProvider gives the CPUs held exclusively by a container, and those
// that can be handed out.
type CPUProvider interface {
	ContainerCPUs(podUID types.UID, container string) []int64
	AllocatableCPUs() []int64
}

// MemoryProvider gives the memory blocks held by a container, and the
// allocatable ones.
type MemoryProvider interface {
	ContainerMemory(podUID types.UID, container string) []*api.ContainerMemory
	AllocatableMemory() []*api.ContainerMemory
}

// DeviceProvider gives the device-plugin devices held by a container,
// and the allocatable (healthy) ones.
type DeviceProvider interface {
	ContainerDevices(podUID types.UID, container string) []*api.ContainerDevices
	AllocatableDevices() []*api.ContainerDevices
}

// DynamicResourcesProvider gives the DRA claims a container uses; a DRA
// manager implements it.
type DynamicResourcesProvider interface {
	DynamicResources(pod *v1.Pod, container *v1.Container) []*api.DynamicResource
}

// Config configures a Server. Pods is required; a nil provider reports
// nothing.
type Config struct {
	// Dir is the socket directory, <rootDir>/pod-resources; created 0750.
	Dir  string
	Pods PodLister
	// AllPods, when set, is what the v1alpha1 List reports (upstream's
	// GetPods: terminated pods too); the active pods otherwise.
	AllPods          AllPodLister
	CPUs             CPUProvider
	Memory           MemoryProvider
	Devices          DeviceProvider
	DynamicResources DynamicResourcesProvider
	// QPS and Burst of the rate limit; DefaultQPS and DefaultBurst when 0.
	QPS   int
	Burst int
	// Clock times the rate limit; clock.RealClock{} when nil.
	Clock clock.PassiveClock
}

// Server is the podresources v1 service (and, from Run, the deprecated
// v1alpha1 one beside it).
type Server struct {
	api.UnsafePodResourcesListerServer

	cfg     Config
	limiter *rate.Limiter
	metrics *metrics
}

var _ api.PodResourcesListerServer = (*Server)(nil)

// New checks cfg and builds a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Pods == nil {
		return nil, errors.New("podresources: Config.Pods is required")
	}
	if cfg.QPS < 0 || cfg.Burst < 0 {
		return nil, fmt.Errorf("podresources: Config.QPS %d and Config.Burst %d must not be negative", cfg.QPS, cfg.Burst)
	}
	if cfg.QPS == 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Server{cfg: cfg, limiter: rate.NewLimiter(rate.Limit(cfg.QPS), cfg.Burst), metrics: newMetrics()}, nil
}

// SocketPath is where Run serves.
func (s *Server) SocketPath() string { return filepath.Join(s.cfg.Dir, SocketName) }

// Limit is the rate-limiting interceptor Run's gRPC server uses.
func (s *Server) Limit(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !s.limiter.AllowN(s.cfg.Clock.Now(), 1) {
		return nil, ErrLimitExceeded
	}
	return handler(ctx, req)
}

// Run creates the directory, replaces a stale socket, and serves until
// ctx is done.
func (s *Server) Run(ctx context.Context) error {
	if s.cfg.Dir == "" {
		return errors.New("podresources: Config.Dir is required to serve")
	}
	if err := os.MkdirAll(s.cfg.Dir, 0o750); err != nil {
		return fmt.Errorf("podresources: create %s: %w", s.cfg.Dir, err)
	}
	path := s.SocketPath()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("podresources: remove stale %s: %w", path, err)
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("podresources: listen on %s: %w", path, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(s.Limit))
	v1alpha1.RegisterPodResourcesListerServer(srv, alphaServer{s: s})
	api.RegisterPodResourcesListerServer(srv, s)
	klog.FromContext(ctx).Info("Starting to serve the podresources API", "endpoint", "unix://"+path)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case <-ctx.Done():
		srv.Stop()
		_ = <-done // Serve returns nil after Stop
		return nil
	case err := <-done:
		return fmt.Errorf("podresources: serve %s: %w", path, err)
	}
}
