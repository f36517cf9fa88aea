package pluginwatchertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Registrar serves Registration on a unix socket.
type Registrar struct {
	registerapi.UnimplementedRegistrationServer

	socket string
	info   *registerapi.PluginInfo

	mu       sync.Mutex
	failInfo int
	statuses []*registerapi.RegistrationStatus
	updates  chan *registerapi.RegistrationStatus

	server *grpc.Server
	done   chan struct{}
}

var _ registerapi.RegistrationServer = (*Registrar)(nil)

// New builds a registrar that will serve info on socket (by convention
// <plugins_registry>/<name>-reg.sock; the watcher only needs it in its
// directory and not starting with a dot).
func New(socket string, info *registerapi.PluginInfo) *Registrar {
	return &Registrar{
		socket:  socket,
		info:    info,
		updates: make(chan *registerapi.RegistrationStatus, 64),
	}
}

// FailGetInfo makes the next n GetInfo calls fail with Unavailable.
func (r *Registrar) FailGetInfo(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failInfo = n
}

// Start listens on the socket (removing a stale one first) and serves
// until Stop.
func (r *Registrar) Start() error {
	if err := os.Remove(r.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", r.socket, err)
	}
	l, err := net.Listen("unix", r.socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", r.socket, err)
	}
	r.server = grpc.NewServer()
	registerapi.RegisterRegistrationServer(r.server, r)
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		_ = r.server.Serve(l)
	}()
	return nil
}

// Stop stops serving and removes the socket (the watcher then
// deregisters the plugin).
func (r *Registrar) Stop() {
	if r.server == nil {
		return
	}
	r.server.Stop()
	<-r.done
	r.server = nil
	_ = os.Remove(r.socket)
}

// Socket is the registration socket's path.
func (r *Registrar) Socket() string { return r.socket }

// GetInfo answers with the registrar's PluginInfo.
func (r *Registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failInfo > 0 {
		r.failInfo--
		return nil, status.Error(codes.Unavailable, "pluginwatchertest: GetInfo made to fail")
	}
	return &registerapi.PluginInfo{
		Type:              r.info.Type,
		Name:              r.info.Name,
		Endpoint:          r.info.Endpoint,
		SupportedVersions: append([]string(nil), r.info.SupportedVersions...),
	}, nil
}

// NotifyRegistrationStatus records the watcher's answer.
func (r *Registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	c := &registerapi.RegistrationStatus{PluginRegistered: s.PluginRegistered, Error: s.Error}
	r.mu.Lock()
	r.statuses = append(r.statuses, c)
	r.mu.Unlock()
	select {
	case r.updates <- c:
	default: // a test not reading Updates does not block the watcher
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Statuses are the statuses received so far, oldest first.
func (r *Registrar) Statuses() []*registerapi.RegistrationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*registerapi.RegistrationStatus(nil), r.statuses...)
}

// Updates delivers each status as it arrives (up to 64 unread).
func (r *Registrar) Updates() <-chan *registerapi.RegistrationStatus { return r.updates }

// WaitStatus returns the next status received, or ctx's error.
func (r *Registrar) WaitStatus(ctx context.Context) (*registerapi.RegistrationStatus, error) {
	select {
	case s := <-r.updates:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
