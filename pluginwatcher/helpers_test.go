package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodekit/nodekit/pluginwatcher/pluginwatchertest"
)

// fakeHandler records the calls a watcher makes.
type fakeHandler struct {
	mu          sync.Mutex
	calls       []string
	validateErr error
	registerErr error
}

var _ Handler = (*fakeHandler)(nil)

func (h *fakeHandler) record(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, s)
}

func (h *fakeHandler) Calls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

func (h *fakeHandler) ValidatePlugin(_ context.Context, name, endpoint string, versions []string) error {
	h.record(fmt.Sprintf("validate %s %s %s", name, endpoint, strings.Join(versions, ",")))
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validateErr
}

func (h *fakeHandler) RegisterPlugin(_ context.Context, name, endpoint string, versions []string) error {
	h.record(fmt.Sprintf("register %s %s %s", name, endpoint, strings.Join(versions, ",")))
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.registerErr
}

func (h *fakeHandler) DeRegisterPlugin(_ context.Context, name, endpoint string) {
	h.record(fmt.Sprintf("deregister %s %s", name, endpoint))
}

// shortDir is a temporary directory with a path short enough for unix
// sockets (t.TempDir's can pass the 108-byte limit).
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return filepath.Join(d, "plugins_registry")
}

// serve starts a registrar for info on dir/name, stopped at cleanup.
func serve(t *testing.T, dir, name string, info *registerapi.PluginInfo) *pluginwatchertest.Registrar {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	r := pluginwatchertest.New(filepath.Join(dir, name), info)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// runWatcher runs w until the test ends.
func runWatcher(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitFor polls cond (fsnotify delivers in its own time) until a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nextStatus is the registrar's next NotifyRegistrationStatus.
func nextStatus(t *testing.T, r *pluginwatchertest.Registrar) *registerapi.RegistrationStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := r.WaitStatus(ctx)
	if err != nil {
		t.Fatalf("no registration status from %s: %v", r.Socket(), err)
	}
	return s
}

func names(ps []Plugin) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Type+"/"+p.Name)
	}
	return out
}

var errNope = errors.New("nope")
