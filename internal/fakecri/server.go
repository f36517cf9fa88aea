package fakecri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/clock"
)

// Default values of Config.
const (
	DefaultPodCIDR      = "10.244.0.0/16"
	DefaultSandboxImage = "registry.k8s.io/pause:3.10.1"
	// RuntimeName is the name Version reports, and so the scheme of the
	// container IDs agents publish ("fakecri://...").
	RuntimeName = "fakecri"
	// StopExitCode is the exit code of a stopped container.
	StopExitCode = 137
)

// Config configures a Server. Dir is required.
type Config struct {
	// Dir holds the socket (Dir/cri.sock) and is the image filesystem
	// ImageFsInfo reports. Created if missing; its path must leave room for
	// the socket name within the 107 bytes of a unix socket path.
	Dir string
	// Images are present from the start (ImageStatus finds them).
	Images []string
	// PodCIDR is where sandbox IPs come from, in order. Default
	// DefaultPodCIDR.
	PodCIDR string
	// SandboxImage is what the verbose Status names as the sandbox image.
	// Default DefaultSandboxImage.
	SandboxImage string
	// Clock stamps stats and container exits. Default: the real clock.
	// (The upstream fakes stamp creation and start times with the wall
	// clock themselves.)
	Clock clock.PassiveClock
}

// Server is a running fake CRI endpoint.
type Server struct {
	// Endpoint is the socket as agents take it: unix://Dir/cri.sock.
	Endpoint string
	// Runtime and Images are the fakes behind the server; tests may read
	// and inject errors through them (under their locks).
	Runtime *critest.FakeRuntimeService
	Images  *critest.FakeImageService

	socket string
	grpc   *grpc.Server
	served chan error
}

// Start listens on Config.Dir/cri.sock and serves until Stop. ctx bounds
// only the start.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("fakecri: Config.Dir is empty")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.SandboxImage == "" {
		cfg.SandboxImage = DefaultSandboxImage
	}
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = DefaultPodCIDR
	}
	pool, err := netip.ParsePrefix(cfg.PodCIDR)
	if err != nil || !pool.Addr().Is4() || pool.Bits() > 30 {
		return nil, fmt.Errorf("fakecri: Config.PodCIDR %q: want an IPv4 prefix of /30 or wider", cfg.PodCIDR)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fakecri: %w", err)
	}
	socket := filepath.Join(dir, "cri.sock")
	if len(socket) > 107 {
		return nil, fmt.Errorf("fakecri: socket path %s is longer than a unix socket path may be (107 bytes)", socket)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("fakecri: remove a stale socket: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("fakecri: listen: %w", err)
	}
	rs := critest.NewFakeRuntimeService()
	rs.FakeStatus = runtimeStatus()
	rs.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}
	is := critest.NewFakeImageService()
	is.SetFakeImageSize(4 << 20)
	is.SetFakeImages(append([]string{cfg.SandboxImage}, cfg.Images...))
	is.SetFakeImagePinned(cfg.SandboxImage, true)
	is.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{
		Timestamp: cfg.Clock.Now().UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: dir},
		UsedBytes: &runtimeapi.UInt64Value{}, InodesUsed: &runtimeapi.UInt64Value{},
	}})

	s := &Server{Endpoint: "unix://" + socket, Runtime: rs, Images: is, socket: socket,
		grpc: grpc.NewServer(), served: make(chan error, 1)}
	runtimeapi.RegisterRuntimeServiceServer(s.grpc, newRuntimeServer(rs, pool, cfg.SandboxImage, dir, cfg.Clock))
	runtimeapi.RegisterImageServiceServer(s.grpc, &imageServer{f: is})
	go func() { s.served <- s.grpc.Serve(ln) }()
	return s, nil
}

// Stop ends the server: calls in progress get until ctx ends to finish,
// then the connections are closed. It removes the socket.
func (s *Server) Stop(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
	err := <-s.served
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	if rerr := os.Remove(s.socket); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// runtimeStatus is what a ready runtime answers.
func runtimeStatus() *runtimeapi.RuntimeStatus {
	return &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
}

// runtimeHandlers are what a containerd 2 with runc 1.1 reports: a default
// and a runc handler, recursive read-only mounts, no user namespaces.
func runtimeHandlers() []*runtimeapi.RuntimeHandler {
	handler := func(name string) *runtimeapi.RuntimeHandler {
		return &runtimeapi.RuntimeHandler{Name: name, Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}}
	}
	return []*runtimeapi.RuntimeHandler{handler(""), handler("runc")}
}
