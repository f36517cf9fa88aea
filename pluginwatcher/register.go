package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Upstream's timeouts (operationexecutor) and back-off
// (exponentialbackoff) for plugin registration.
const (
	infoTimeout    = 10 * time.Second // dial and GetInfo
	notifyTimeout  = 5 * time.Second
	initialBackoff = 500 * time.Millisecond
	maxBackoff     = 2*time.Minute + 2*time.Second
)

// Reconcile is one step: it deregisters the plugins whose socket is gone
// or was re-created, then registers the sockets not registered yet whose
// back-off has passed, in parallel, and waits for them.
func (w *Watcher) Reconcile(ctx context.Context) {
	w.mu.Lock()
	var gone []*registered
	for path, r := range w.actual {
		if id, ok := w.desired[path]; !ok || id != r.id {
			gone = append(gone, r)
			delete(w.actual, path)
		}
	}
	for path, rt := range w.retries {
		if id, ok := w.desired[path]; !ok || id != rt.id {
			delete(w.retries, path) // a new socket starts afresh
		}
	}
	now := w.clock.Now()
	todo := map[string]identity{}
	for path, id := range w.desired {
		if _, ok := w.actual[path]; ok {
			continue
		}
		if rt, ok := w.retries[path]; ok && now.Before(rt.next) {
			continue
		}
		todo[path] = id
	}
	w.mu.Unlock()

	for _, r := range gone {
		w.logger.Info("Deregistering plugin", "type", r.Type, "name", r.Name, "endpoint", r.Endpoint, "socket", r.SocketPath)
		r.handler.DeRegisterPlugin(ctx, r.Name, r.Endpoint)
	}
	var wg sync.WaitGroup
	for path, id := range todo {
		wg.Go(func() {
			r, err := w.register(ctx, path)
			w.mu.Lock()
			defer w.mu.Unlock()
			if err == nil {
				r.id = id
				w.actual[path] = r
				delete(w.retries, path)
				w.logger.Info("Registered plugin", "type", r.Type, "name", r.Name, "endpoint", r.Endpoint, "socket", path)
				return
			}
			rt := w.retries[path]
			if rt == nil {
				rt = &retry{id: id}
				w.retries[path] = rt
			}
			delay := initialBackoff << min(rt.failures, 16)
			delay = min(delay, maxBackoff)
			rt.failures++
			rt.next = w.clock.Now().Add(delay)
			w.logger.Error(err, "Plugin registration failed", "socket", path, "retryIn", delay)
		})
	}
	wg.Wait()
}

// register asks the plugin at path for its info and registers it with
// its handler, telling the plugin the outcome as upstream does.
func (w *Watcher) register(ctx context.Context, path string) (*registered, error) {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("RegisterPlugin error -- dial failed at socket %s, err: %w", path, err)
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	infoCtx, cancel := context.WithTimeout(ctx, infoTimeout)
	info, err := client.GetInfo(infoCtx, &registerapi.InfoRequest{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket %s, err: %w", path, err)
	}
	handler, ok := w.handlers[info.Type]
	if !ok {
		return nil, notify(ctx, client, fmt.Sprintf("RegisterPlugin error -- no handler registered for plugin type: %s at socket %s", info.Type, path))
	}
	endpoint := info.Endpoint
	if endpoint == "" {
		endpoint = path
	}
	if err := handler.ValidatePlugin(ctx, info.Name, endpoint, info.SupportedVersions); err != nil {
		return nil, notify(ctx, client, fmt.Sprintf("RegisterPlugin error -- plugin validation failed with err: %v", err))
	}
	if err := handler.RegisterPlugin(ctx, info.Name, endpoint, info.SupportedVersions); err != nil {
		return nil, notify(ctx, client, fmt.Sprintf("RegisterPlugin error -- plugin registration failed with err: %v", err))
	}
	if err := notify(ctx, client, ""); err != nil {
		// Registered but the plugin does not know it: undo, and retry.
		handler.DeRegisterPlugin(ctx, info.Name, endpoint)
		return nil, fmt.Errorf("RegisterPlugin error -- failed to send registration status at socket %s, err: %w", path, err)
	}
	return &registered{
		Plugin: Plugin{
			SocketPath: path,
			Type:       info.Type,
			Name:       info.Name,
			Endpoint:   endpoint,
			Versions:   append([]string(nil), info.SupportedVersions...),
		},
		handler: handler,
	}, nil
}

// notify sends the registration status: registered when msg is empty,
// else not registered with msg as the error. It returns msg as an error
// (with the RPC's own error when the status could not be sent), or nil
// for a successful registration sent.
func notify(ctx context.Context, client registerapi.RegistrationClient, msg string) error {
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	_, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: msg == "", Error: msg})
	switch {
	case err != nil && msg != "":
		return fmt.Errorf("%s: %w", msg, err)
	case err != nil:
		return err
	case msg != "":
		return errors.New(msg)
	}
	return nil
}
