package pluginwatcher

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func csiInfo(name, endpoint string) *registerapi.PluginInfo {
	return &registerapi.PluginInfo{Type: CSIPlugin, Name: name, Endpoint: endpoint, SupportedVersions: []string{"1.0.0"}}
}

func TestRegistersSocketsPresentAndNew(t *testing.T) {
	dir := shortDir(t)
	before := serve(t, dir, "a-reg.sock", csiInfo("a.example.com", "/csi/a.sock"))
	csi, dra := &fakeHandler{}, &fakeHandler{}
	w, err := New(Options{Dir: dir, Handlers: map[string]Handler{CSIPlugin: csi, DRAPlugin: dra}})
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	if s := nextStatus(t, before); !s.PluginRegistered || s.Error != "" {
		t.Fatalf("status of the socket present at start = %+v, want registered", s)
	}
	// A DRA plugin without an endpoint is served on its registration socket.
	after := serve(t, dir, "b-reg.sock", &registerapi.PluginInfo{Type: DRAPlugin, Name: "b.example.com", SupportedVersions: []string{"v1.DRAPlugin"}})
	if s := nextStatus(t, after); !s.PluginRegistered {
		t.Fatalf("status of the new socket = %+v, want registered", s)
	}
	want := []Plugin{
		{SocketPath: before.Socket(), Type: CSIPlugin, Name: "a.example.com", Endpoint: "/csi/a.sock", Versions: []string{"1.0.0"}},
		{SocketPath: after.Socket(), Type: DRAPlugin, Name: "b.example.com", Endpoint: after.Socket(), Versions: []string{"v1.DRAPlugin"}},
	}
	waitFor(t, "both plugins registered", func() bool { return len(w.Registered()) == 2 })
	if got := w.Registered(); !slices.EqualFunc(got, want, func(a, b Plugin) bool {
		return a.SocketPath == b.SocketPath && a.Type == b.Type && a.Name == b.Name && a.Endpoint == b.Endpoint && slices.Equal(a.Versions, b.Versions)
	}) {
		t.Fatalf("Registered() = %+v, want %+v", got, want)
	}
	if got, want := csi.Calls(), []string{"validate a.example.com /csi/a.sock 1.0.0", "register a.example.com /csi/a.sock 1.0.0"}; !slices.Equal(got, want) {
		t.Errorf("CSI handler calls = %q, want %q", got, want)
	}
	if got, want := dra.Calls(), []string{
		"validate b.example.com " + after.Socket() + " v1.DRAPlugin",
		"register b.example.com " + after.Socket() + " v1.DRAPlugin",
	}; !slices.Equal(got, want) {
		t.Errorf("DRA handler calls = %q, want %q", got, want)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("directory mode = %v (%v), want 0750", fi.Mode().Perm(), err)
	}
}

func TestCreatesDirectory(t *testing.T) {
	dir := shortDir(t)
	w, err := New(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	waitFor(t, "the directory", func() bool {
		fi, err := os.Stat(dir)
		return err == nil && fi.IsDir() && fi.Mode().Perm() == 0o750
	})
}

func TestRemovedSocketDeregisters(t *testing.T) {
	dir := shortDir(t)
	r := serve(t, dir, "a-reg.sock", csiInfo("a.example.com", "/csi/a.sock"))
	h := &fakeHandler{}
	w, err := New(Options{Dir: dir, Handlers: map[string]Handler{CSIPlugin: h}})
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	nextStatus(t, r)
	waitFor(t, "registration", func() bool { return len(w.Registered()) == 1 })
	r.Stop()
	// Registered drops the plugin just before its handler is called.
	waitFor(t, "deregistration", func() bool { return len(w.Registered()) == 0 && len(h.Calls()) == 3 })
	if got := h.Calls(); len(got) != 3 || got[2] != "deregister a.example.com /csi/a.sock" {
		t.Fatalf("handler calls = %q, want validate, register, deregister", got)
	}
}

func TestRecreatedSocketReregisters(t *testing.T) {
	dir := shortDir(t)
	r := serve(t, dir, "a-reg.sock", csiInfo("a.example.com", "/csi/a.sock"))
	h := &fakeHandler{}
	w, err := New(Options{Dir: dir, Handlers: map[string]Handler{CSIPlugin: h}})
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	nextStatus(t, r)
	waitFor(t, "registration", func() bool { return len(w.Registered()) == 1 })
	r.Stop()
	if err := r.Start(); err != nil { // the same path, a new socket
		t.Fatal(err)
	}
	if s := nextStatus(t, r); !s.PluginRegistered {
		t.Fatalf("status after re-creation = %+v, want registered", s)
	}
	want := []string{
		"validate a.example.com /csi/a.sock 1.0.0", "register a.example.com /csi/a.sock 1.0.0",
		"deregister a.example.com /csi/a.sock",
		"validate a.example.com /csi/a.sock 1.0.0", "register a.example.com /csi/a.sock 1.0.0",
	}
	waitFor(t, "re-registration", func() bool { return len(h.Calls()) == len(want) && len(w.Registered()) == 1 })
	if got := h.Calls(); !slices.Equal(got, want) {
		t.Fatalf("handler calls = %q, want %q", got, want)
	}
}

func TestUnknownTypeIsRefused(t *testing.T) {
	dir := shortDir(t)
	r := serve(t, dir, "x-reg.sock", &registerapi.PluginInfo{Type: "DevicePlugin", Name: "x"})
	h := &fakeHandler{}
	w, err := New(Options{Dir: dir, Handlers: map[string]Handler{CSIPlugin: h}})
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	s := nextStatus(t, r)
	want := "RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at socket " + r.Socket()
	if s.PluginRegistered || s.Error != want {
		t.Fatalf("status = %+v, want not registered with %q", s, want)
	}
	if got := w.Registered(); len(got) != 0 {
		t.Fatalf("Registered() = %+v, want none", got)
	}
	if got := h.Calls(); len(got) != 0 {
		t.Fatalf("handler calls = %q, want none", got)
	}
}

func TestIgnoresDotFilesAndNonSockets(t *testing.T) {
	dir := shortDir(t)
	hidden := serve(t, dir, ".hidden.sock", csiInfo("hidden", ""))
	if err := os.WriteFile(filepath.Join(dir, "plain.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := &fakeHandler{}
	w, err := New(Options{Dir: dir, Handlers: map[string]Handler{CSIPlugin: h}})
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	// One socket in a subdirectory made after start, one beside the ignored files.
	sub := serve(t, filepath.Join(dir, "sub"), "s-reg.sock", csiInfo("sub", ""))
	top := serve(t, dir, "t-reg.sock", csiInfo("top", ""))
	nextStatus(t, sub)
	nextStatus(t, top)
	waitFor(t, "two plugins", func() bool { return len(w.Registered()) == 2 })
	if got := names(w.Registered()); !slices.Equal(got, []string{"CSIPlugin/sub", "CSIPlugin/top"}) {
		t.Fatalf("registered %q, want sub and top", got)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.desired {
		if strings.Contains(p, "hidden") || strings.Contains(p, "plain") {
			t.Errorf("socket %s recorded, want it ignored", p)
		}
	}
	if got := hidden.Statuses(); len(got) != 0 {
		t.Errorf("the dot-file socket got %+v, want nothing", got)
	}
}

// newStepWatcher is a watcher whose steps the test drives: the sockets are
// recorded as Run's walk would, and Reconcile is called directly.
func newStepWatcher(t *testing.T, dir string, h Handler, sockets ...string) (*Watcher, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	w, err := New(Options{Dir: dir, Handlers: map[string]Handler{CSIPlugin: h}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sockets {
		if !w.addSocket(s, false) {
			t.Fatalf("%s not recorded as a socket", s)
		}
	}
	return w, clk
}

func TestGetInfoFailureRetriesWithBackoff(t *testing.T) {
	dir := shortDir(t)
	r := serve(t, dir, "a-reg.sock", csiInfo("a", ""))
	r.FailGetInfo(2)
	h := &fakeHandler{}
	w, clk := newStepWatcher(t, dir, h, r.Socket())
	ctx := t.Context()
	w.Reconcile(ctx) // GetInfo fails: retry in 500ms
	w.Reconcile(ctx)
	clk.Step(499 * time.Millisecond)
	w.Reconcile(ctx)
	if len(w.Registered()) != 0 || len(h.Calls()) != 0 {
		t.Fatalf("registered before the back-off passed: %+v", w.Registered())
	}
	clk.Step(time.Millisecond)
	w.Reconcile(ctx) // fails again: retry in 1s
	clk.Step(999 * time.Millisecond)
	w.Reconcile(ctx)
	if len(w.Registered()) != 0 || len(r.Statuses()) != 0 {
		t.Fatalf("registered before the doubled back-off passed: %+v", w.Registered())
	}
	clk.Step(time.Millisecond)
	w.Reconcile(ctx)
	if got := names(w.Registered()); !slices.Equal(got, []string{"CSIPlugin/a"}) {
		t.Fatalf("registered %q after the back-off, want a", got)
	}
	if s := r.Statuses(); len(s) != 1 || !s[0].PluginRegistered {
		t.Fatalf("statuses = %+v, want one registered", s)
	}
}

func TestValidateErrorIsNotifiedAndRetried(t *testing.T) {
	dir := shortDir(t)
	r := serve(t, dir, "a-reg.sock", csiInfo("a", "/csi/a.sock"))
	h := &fakeHandler{validateErr: errNope}
	w, clk := newStepWatcher(t, dir, h, r.Socket())
	ctx := t.Context()
	w.Reconcile(ctx)
	s := r.Statuses()
	if len(s) != 1 || s[0].PluginRegistered || s[0].Error != "RegisterPlugin error -- plugin validation failed with err: nope" {
		t.Fatalf("statuses = %+v, want one refusal with the validation error", s)
	}
	if got := h.Calls(); !slices.Equal(got, []string{"validate a /csi/a.sock 1.0.0"}) {
		t.Fatalf("handler calls = %q, want validate only", got)
	}
	h.mu.Lock()
	h.validateErr = nil
	h.mu.Unlock()
	clk.Step(initialBackoff)
	w.Reconcile(ctx)
	if s := r.Statuses(); len(s) != 2 || !s[1].PluginRegistered {
		t.Fatalf("statuses = %+v, want the retry registered", s)
	}
}

func TestRegisterErrorIsNotified(t *testing.T) {
	dir := shortDir(t)
	r := serve(t, dir, "a-reg.sock", csiInfo("a", ""))
	h := &fakeHandler{registerErr: errNope}
	w, _ := newStepWatcher(t, dir, h, r.Socket())
	w.Reconcile(t.Context())
	s := r.Statuses()
	if len(s) != 1 || s[0].PluginRegistered || s[0].Error != "RegisterPlugin error -- plugin registration failed with err: nope" {
		t.Fatalf("statuses = %+v, want one refusal with the registration error", s)
	}
	if len(w.Registered()) != 0 {
		t.Fatalf("Registered() = %+v, want none", w.Registered())
	}
}

func TestDialFailureRetries(t *testing.T) {
	dir := shortDir(t)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	// A socket nobody accepts on: bound, not listening.
	path := filepath.Join(dir, "dead.sock")
	fd, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	h := &fakeHandler{}
	w, _ := newStepWatcher(t, dir, h, path)
	w.Reconcile(t.Context())
	w.mu.Lock()
	rt := w.retries[path]
	w.mu.Unlock()
	if rt == nil || rt.failures != 1 {
		t.Fatalf("retry state = %+v, want one failure recorded", rt)
	}
	if len(h.Calls()) != 0 {
		t.Fatalf("handler calls = %q, want none", h.Calls())
	}
}

func TestTotalPluginsMetric(t *testing.T) {
	dir := shortDir(t)
	r := serve(t, dir, "a-reg.sock", csiInfo("a", ""))
	x := serve(t, dir, "x-reg.sock", &registerapi.PluginInfo{Type: "Other", Name: "x"})
	reg := prometheus.NewRegistry()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	w, err := New(Options{Dir: dir, Handlers: map[string]Handler{CSIPlugin: &fakeHandler{}}, Clock: clk, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	w.addSocket(r.Socket(), false)
	w.addSocket(x.Socket(), false)
	w.Reconcile(t.Context())
	want := `
# HELP plugin_manager_total_plugins Number of plugins in Plugin Manager
# TYPE plugin_manager_total_plugins gauge
plugin_manager_total_plugins{socket_path="` + r.Socket() + `",state="actual_state_of_world"} 1
plugin_manager_total_plugins{socket_path="` + r.Socket() + `",state="desired_state_of_world"} 1
plugin_manager_total_plugins{socket_path="` + x.Socket() + `",state="desired_state_of_world"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plugin_manager_total_plugins"); err != nil {
		t.Fatal(err)
	}
}

func TestNewChecksOptions(t *testing.T) {
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), "Options.Dir") {
		t.Errorf("New without Dir: %v, want an error naming Options.Dir", err)
	}
	if _, err := New(Options{Dir: "/x", Handlers: map[string]Handler{CSIPlugin: nil}}); err == nil || !strings.Contains(err.Error(), "CSIPlugin") {
		t.Errorf("New with a nil handler: %v, want an error naming it", err)
	}
}

func TestNewIdentityReregistersInOneStep(t *testing.T) {
	dir := shortDir(t)
	r := serve(t, dir, "a-reg.sock", csiInfo("a", "/csi/a.sock"))
	h := &fakeHandler{}
	w, _ := newStepWatcher(t, dir, h, r.Socket())
	ctx := t.Context()
	w.Reconcile(ctx)
	r.Stop()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	// The removal was never seen: only the new socket's identity tells.
	if !w.addSocket(r.Socket(), true) {
		t.Fatal("the re-created socket was not seen as new")
	}
	w.Reconcile(ctx)
	want := []string{
		"validate a /csi/a.sock 1.0.0", "register a /csi/a.sock 1.0.0",
		"deregister a /csi/a.sock",
		"validate a /csi/a.sock 1.0.0", "register a /csi/a.sock 1.0.0",
	}
	if got := h.Calls(); !slices.Equal(got, want) {
		t.Fatalf("handler calls = %q, want %q", got, want)
	}
	if got := names(w.Registered()); !slices.Equal(got, []string{"CSIPlugin/a"}) {
		t.Fatalf("registered %q, want a", got)
	}
}
