package csitest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// SupportedVersions are the CSI versions the driver announces when it
// registers.
var SupportedVersions = []string{"1.0.0"}

// registration serves the kubelet plugin-registration API for the driver.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
	versions       []string
	status         chan *registerapi.RegistrationStatus
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint, SupportedVersions: r.versions}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	select {
	case r.status <- s:
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// RegistrationSocket is the driver's socket in a plugin registry dir.
func RegistrationSocket(registryDir, name string) string {
	return filepath.Join(registryDir, name+"-reg.sock")
}

// Serve serves the driver on endpoint (a unix socket path) and, when
// registryDir is set, its registration socket there, until ctx ends. The
// sockets are removed when it returns. Registration statuses the agent
// sends are reported through onStatus, if set.
func Serve(ctx context.Context, cfg Config, endpoint, registryDir string, onStatus func(ok bool, msg string)) error {
	srv, err := NewServer(cfg)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	csipb.RegisterIdentityServer(g, srv)
	csipb.RegisterNodeServer(g, srv)
	lis, err := listen(endpoint)
	if err != nil {
		return err
	}
	defer os.Remove(endpoint)
	errc := make(chan error, 2)
	go func() { errc <- g.Serve(lis) }()
	defer g.Stop()
	if registryDir != "" {
		reg := &registration{name: cfg.Name, endpoint: endpoint, versions: SupportedVersions, status: make(chan *registerapi.RegistrationStatus, 4)}
		rg := grpc.NewServer()
		registerapi.RegisterRegistrationServer(rg, reg)
		sock := RegistrationSocket(registryDir, cfg.Name)
		rlis, err := listen(sock)
		if err != nil {
			return err
		}
		defer os.Remove(sock)
		go func() { errc <- rg.Serve(rlis) }()
		defer rg.Stop()
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case s := <-reg.status:
					if onStatus != nil {
						onStatus(s.GetPluginRegistered(), s.GetError())
					}
				}
			}
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return lis, nil
}
