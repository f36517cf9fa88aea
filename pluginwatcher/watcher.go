package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Handler is what a plugin kind (CSI, DRA) implements.
type Handler interface {
	ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error
	RegisterPlugin(ctx context.Context, name, endpoint string, versions []string) error
	DeRegisterPlugin(ctx context.Context, name, endpoint string)
}

// The plugin types of pluginregistration v1 that kubelet hands to a
// handler (device plugins register with devicemgr instead).
const (
	CSIPlugin = "CSIPlugin"
	DRAPlugin = "DRAPlugin"
)

// DefaultResyncPeriod is how often Run reconciles without an event:
// upstream's reconciler loop period.
const DefaultResyncPeriod = time.Second

// Options configure a Watcher.
type Options struct {
	// Dir is the watched directory, <rootDir>/plugins_registry; it is
	// created (0750) when missing. Required.
	Dir string
	// Handlers by PluginInfo.Type (CSIPlugin, DRAPlugin). A type
	// without a handler is refused.
	Handlers map[string]Handler
	// Clock times back-off and the resync period; clock.RealClock{}
	// when nil.
	Clock clock.WithTicker
	// Logger logs registrations; klog.FromContext(ctx) of Run when
	// unset.
	Logger logr.Logger
	// Registerer, when set, gets plugin_manager_total_plugins.
	Registerer prometheus.Registerer
	// ResyncPeriod, DefaultResyncPeriod when 0.
	ResyncPeriod time.Duration
}

// Plugin is a registered plugin.
type Plugin struct {
	SocketPath string   // the registration socket
	Type       string   // PluginInfo.Type
	Name       string   // PluginInfo.Name
	Endpoint   string   // PluginInfo.Endpoint, or SocketPath when that is empty
	Versions   []string // PluginInfo.SupportedVersions
}

// identity tells a re-created socket from the one registered before:
// its inode and modification time, and the create event it was seen by
// (inodes are reused and mtimes are coarse).
type identity struct {
	ino   uint64
	mtime int64
	event uint64
}

type registered struct {
	Plugin
	id      identity
	handler Handler
}

type retry struct {
	id       identity
	failures int
	next     time.Time
}

// Watcher watches the plugin registration directory and registers the
// plugins it finds with their handlers.
type Watcher struct {
	dir      string
	handlers map[string]Handler
	clock    clock.WithTicker
	logger   logr.Logger
	resync   time.Duration

	mu      sync.Mutex
	events  uint64              // create events seen
	desired map[string]identity // sockets seen, by path
	// walked are the sockets a directory walk recorded and no create event
	// has confirmed yet: the walk can see a socket before the create
	// event of the same socket arrives, which must not re-register it.
	walked  map[string]bool
	actual  map[string]*registered // registered plugins, by socket path
	retries map[string]*retry      // failed registrations, by socket path
}

// New checks opts and builds a Watcher; Run starts it.
func New(opts Options) (*Watcher, error) {
	if opts.Dir == "" {
		return nil, errors.New("pluginwatcher: Options.Dir is required")
	}
	w := &Watcher{
		dir:      filepath.Clean(opts.Dir),
		handlers: map[string]Handler{},
		clock:    opts.Clock,
		logger:   opts.Logger,
		resync:   opts.ResyncPeriod,
		desired:  map[string]identity{},
		walked:   map[string]bool{},
		actual:   map[string]*registered{},
		retries:  map[string]*retry{},
	}
	for t, h := range opts.Handlers {
		if h == nil {
			return nil, fmt.Errorf("pluginwatcher: Options.Handlers[%q] is nil", t)
		}
		w.handlers[t] = h
	}
	if w.clock == nil {
		w.clock = clock.RealClock{}
	}
	if w.resync <= 0 {
		w.resync = DefaultResyncPeriod
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(&collector{w: w}); err != nil {
			return nil, fmt.Errorf("pluginwatcher: Options.Registerer: %w", err)
		}
	}
	return w, nil
}

// Registered lists the registered plugins, by socket path.
func (w *Watcher) Registered() []Plugin {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Plugin, 0, len(w.actual))
	for _, r := range w.actual {
		p := r.Plugin
		p.Versions = append([]string(nil), p.Versions...)
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SocketPath < out[j].SocketPath })
	return out
}

// Run creates the directory, finds the sockets already in it, and then
// follows its changes, reconciling on every event and every resync
// period until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	if w.logger.GetSink() == nil {
		w.logger = klog.FromContext(ctx)
	}
	ctx = klog.NewContext(ctx, w.logger)
	if err := os.MkdirAll(w.dir, 0o750); err != nil {
		return fmt.Errorf("pluginwatcher: create %s: %w", w.dir, err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("pluginwatcher: watch %s: %w", w.dir, err)
	}
	defer fsw.Close()
	if err := w.walk(fsw, w.dir); err != nil {
		return err
	}
	kick := make(chan struct{}, 1)
	kick <- struct{}{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.reconcileLoop(ctx, kick)
	}()
	defer func() { <-done }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fsw.Events:
			if !ok {
				return nil
			}
			if w.handleEvent(fsw, ev) {
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		case err, ok := <-fsw.Errors:
			if !ok {
				return nil
			}
			w.logger.Error(err, "Plugin directory watch error; rescanning", "path", w.dir)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.rescan(fsw)
			}
		}
	}
}

func (w *Watcher) reconcileLoop(ctx context.Context, kick <-chan struct{}) {
	t := w.clock.NewTicker(w.resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C():
		}
		w.Reconcile(ctx)
	}
}

// walk watches dir and its subdirectories and records the sockets in
// them. Only an unwatchable root is an error, as upstream.
func (w *Watcher) walk(fsw *fsnotify.Watcher, root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return fmt.Errorf("pluginwatcher: walk %s: %w", path, err)
			}
			w.logger.Error(err, "Unable to read plugin directory entry", "path", path)
			return nil
		}
		if path != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if err := fsw.Add(path); err != nil {
				if path == root {
					return fmt.Errorf("pluginwatcher: watch %s: %w", path, err)
				}
				w.logger.Error(err, "Unable to watch plugin directory", "path", path)
			}
			return nil
		}
		w.addSocket(path, false)
		return nil
	})
}

// rescan rebuilds the sockets seen after the watch lost events.
func (w *Watcher) rescan(fsw *fsnotify.Watcher) {
	w.mu.Lock()
	old := w.desired
	w.desired = map[string]identity{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for p, id := range w.desired {
			if o, ok := old[p]; ok && o.ino == id.ino && o.mtime == id.mtime {
				w.desired[p] = o // the same socket: not re-registered
			}
		}
	}()
	if err := w.walk(fsw, w.dir); err != nil {
		w.logger.Error(err, "Unable to rescan the plugin directory")
	}
}

// handleEvent updates the sockets seen; it says whether anything changed.
func (w *Watcher) handleEvent(fsw *fsnotify.Watcher, ev fsnotify.Event) bool {
	path := filepath.Clean(ev.Name)
	switch {
	case ev.Has(fsnotify.Create):
		if strings.HasPrefix(filepath.Base(path), ".") {
			return false
		}
		fi, err := os.Stat(path)
		if err != nil {
			return w.removeSocket(path) // gone again already
		}
		if fi.IsDir() {
			if err := w.walk(fsw, path); err != nil {
				w.logger.Error(err, "Unable to watch plugin directory", "path", path)
			}
			return true
		}
		return w.addSocket(path, true)
	case ev.Has(fsnotify.Remove), ev.Has(fsnotify.Rename):
		return w.removeSocket(path)
	}
	return false
}

// addSocket records path if it is a unix socket; created says it was
// seen by a create event, so it is a new socket even if its inode and
// mtime are those of the one before.
func (w *Watcher) addSocket(path string, created bool) bool {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return false
	}
	id := identity{mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = st.Ino
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	old, seen := w.desired[path]
	same := seen && old.ino == id.ino && old.mtime == id.mtime
	switch {
	case created && same && w.walked[path]:
		delete(w.walked, path) // the event of the socket the walk found
		return false
	case created:
		w.events++
		id.event = w.events
		delete(w.walked, path)
	case same:
		return false
	default:
		w.walked[path] = true
	}
	w.desired[path] = id
	return true
}

// removeSocket forgets path and every socket under it.
func (w *Watcher) removeSocket(path string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := false
	for p := range w.desired {
		if p == path || strings.HasPrefix(p, path+string(filepath.Separator)) {
			delete(w.desired, p)
			delete(w.walked, p)
			changed = true
		}
	}
	return changed
}
