package podconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// FileSource is a directory of static pod manifests as a pod source. Every
// regular file in it whose name does not start with "." holds one pod (or a
// PodList), YAML or JSON; subdirectories are not read. It reacts to changes
// through inotify and also re-reads the whole directory every period (20 s),
// so a missed event, or a directory that appears later, is caught up with.
// The path may also name a single manifest file, as upstream's staticPodPath.
//
// A file that cannot be read or decoded is reported (logger and error
// handler, with the file path and field) and does not affect the others; if
// it held valid pods before, they stay in force until it is fixed or removed.
// A file that disappears removes its pods; a directory that disappears
// removes them all.
type FileSource struct {
	dir      string
	nodeName string
	clock    clock.Clock
	o        sourceOptions

	// noWatch turns inotify off, for tests of the periodic re-read.
	noWatch bool

	mu    sync.Mutex           // guards files
	files map[string][]*v1.Pod // path -> last good pods of the file
}

var _ nodekit.Source = (*FileSource)(nil)

// NewFileSource returns a source of the static pods in dir, for node
// nodeName. clk drives the periodic re-read. Options: WithPeriod,
// WithErrorHandler, WithSourceName.
func NewFileSource(dir, nodeName string, clk clock.Clock, opts ...SourceOption) *FileSource {
	if dir != "" {
		dir = filepath.Clean(dir)
	}
	return &FileSource{
		dir:      dir,
		nodeName: nodeName,
		clock:    clk,
		o:        buildSourceOptions(nodekit.SourceFile, opts),
		files:    map[string][]*v1.Pod{},
	}
}

// Name implements nodekit.Source ("file" unless WithSourceName).
func (s *FileSource) Name() string { return s.o.name }

// Scan re-reads the whole directory once and returns the pods now in force
// (copies the caller owns, ordered by file name) and every problem met,
// joined. It blocks on reading the directory and is the synchronous step of
// Run; do not call it while Run runs.
func (s *FileSource) Scan(ctx context.Context) ([]*v1.Pod, error) {
	results := s.rescan(ctx)
	var errs []error
	for _, path := range slices.Sorted(maps.Keys(results)) {
		if results[path] != nil {
			errs = append(errs, results[path])
		}
	}
	return s.snapshot(), errors.Join(errs...)
}

// Run implements nodekit.Source. It sends a SET after the first read and
// then whenever the set of pods changes.
func (s *FileSource) Run(ctx context.Context, out chan<- nodekit.PodUpdate) error {
	if s.dir == "" {
		return errors.New("podconfig: file source: directory is empty")
	}
	if s.nodeName == "" {
		return errors.New("podconfig: file source: node name is empty")
	}
	if s.clock == nil {
		return errors.New("podconfig: file source: clock is nil")
	}
	r := &fileRun{s: s, out: out, rep: newReporter(s.o.onError), logger: klog.FromContext(ctx), first: true}
	defer r.stopWatch()

	// Watch before the first read, so no change between the two is missed.
	r.startWatch(ctx)
	// The timer is armed before each send, so a receiver that has the SET
	// knows the next re-read is already scheduled.
	timer := s.clock.NewTimer(s.o.period)
	defer timer.Stop()
	r.reportAll(ctx, s.rescan(ctx))
	if !r.send(ctx) {
		return ctx.Err()
	}
	for {
		changed, running := r.next(ctx, timer)
		if !running {
			return ctx.Err()
		}
		if changed && !r.send(ctx) {
			return ctx.Err()
		}
	}
}

// fileRun is the state of one Run of a FileSource: its inotify watch (nil
// while there is none), the problems it has reported and the last SET it
// sent.
type fileRun struct {
	s      *FileSource
	out    chan<- nodekit.PodUpdate
	rep    *reporter
	logger klog.Logger

	w     *fsnotify.Watcher
	sent  []*v1.Pod // a copy of the last SET
	first bool      // no SET sent yet
}

// next waits for the next reason to look at the manifests again (the
// period, inotify events or an inotify error) and acts on it. It returns
// whether the pods may have changed, so a SET is due if they did, and false
// for running once ctx is done.
func (r *fileRun) next(ctx context.Context, timer clock.Timer) (changed, running bool) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if r.w != nil {
		events, errs = r.w.Events, r.w.Errors
	}
	select {
	case <-ctx.Done():
		return false, false
	case <-timer.C():
		timer.Reset(r.s.o.period)
		r.startWatch(ctx)
		r.reportAll(ctx, r.s.rescan(ctx))
	case ev, ok := <-events:
		if !ok {
			r.stopWatch()
			return false, true
		}
		r.handle(ctx, ev)
		r.drainBurst(ctx)
	case err, ok := <-errs:
		if !ok {
			r.stopWatch()
			return false, true
		}
		// An overflow lost events; any other error may have too.
		r.rep.report(ctx, "inotify", fmt.Errorf("watch %s: %w", r.s.dir, err))
		r.reportAll(ctx, r.s.rescan(ctx))
	}
	return true, true
}

// drainBurst handles the events already queued (the rest of a burst such
// as create, write, chmod), so one SET covers them all.
func (r *fileRun) drainBurst(ctx context.Context) {
	for drained := false; !drained && r.w != nil; {
		select {
		case ev, ok := <-r.w.Events:
			if !ok {
				r.stopWatch()
			} else {
				r.handle(ctx, ev)
			}
		default:
			drained = true
		}
	}
}

// handle re-reads what one inotify event is about. Dot files are ignored.
func (r *fileRun) handle(ctx context.Context, ev fsnotify.Event) {
	path := filepath.Clean(ev.Name)
	switch {
	case path == r.s.dir:
		// The directory (or single file) itself went away or was
		// replaced, and its watch with it: re-read, watch again (or,
		// if it is not back yet, on a later tick).
		r.stopWatch()
		r.reportAll(ctx, r.s.rescan(ctx))
		r.startWatch(ctx)
	case strings.HasPrefix(filepath.Base(path), "."):
	default:
		r.reportAll(ctx, map[string]error{path: r.s.refresh(ctx, path)})
	}
}

// startWatch sets up the inotify watch of the path if there is none (and
// inotify is not turned off). A failure is reported, and the periodic
// re-read stands in until a later tick manages it.
func (r *fileRun) startWatch(ctx context.Context) {
	if r.w != nil || r.s.noWatch {
		return
	}
	nw, err := fsnotify.NewWatcher()
	if err == nil {
		if err = nw.Add(r.s.dir); err != nil {
			_ = nw.Close()
		}
	}
	if err != nil {
		r.rep.report(ctx, "inotify", fmt.Errorf("watch %s (re-reading every %v instead): %w", r.s.dir, r.s.o.period, err))
		return
	}
	r.rep.clear("inotify")
	r.w = nw
}

func (r *fileRun) stopWatch() {
	if r.w != nil {
		_ = r.w.Close()
		r.w = nil
	}
}

// send sends the pods in force as a SET, unless they are what the last
// SET held. It returns false if ctx ended first.
func (r *fileRun) send(ctx context.Context) bool {
	pods := r.s.snapshot()
	if !r.first && equality.Semantic.DeepEqual(pods, r.sent) {
		return true
	}
	keep := copyPods(pods)
	select {
	case r.out <- nodekit.PodUpdate{Op: nodekit.SET, Pods: pods, Source: r.s.Name()}:
		r.first, r.sent = false, keep
		return true
	case <-ctx.Done():
		return false
	}
}

// reportAll reports the problem of each path, in path order, and logs the
// paths whose earlier problem is gone.
func (r *fileRun) reportAll(ctx context.Context, results map[string]error) {
	for _, path := range slices.Sorted(maps.Keys(results)) {
		if err := results[path]; err != nil {
			r.rep.report(ctx, path, err)
		} else if r.rep.clear(path) {
			r.logger.Info("Manifest problem resolved", "path", path)
		}
	}
}

// rescan re-reads the directory: every manifest in it, and forgets the
// files that are gone. It returns the outcome per path looked at (nil for a
// good file), plus the directory's own problem under its path.
func (s *FileSource) rescan(ctx context.Context) map[string]error {
	results := map[string]error{}
	if info, err := os.Stat(s.dir); err == nil && info.Mode().IsRegular() {
		// A single manifest file, which upstream's staticPodPath allows.
		results[s.dir] = s.refresh(ctx, s.dir)
		return results
	}
	entries, err := os.ReadDir(s.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.mu.Lock()
		clear(s.files)
		s.mu.Unlock()
		results[s.dir] = fmt.Errorf("manifest directory %s does not exist", s.dir)
		return results
	case err != nil:
		// Keep what we have: an unreadable directory is not an empty one.
		results[s.dir] = fmt.Errorf("read manifest directory: %w", err)
		return results
	}
	results[s.dir] = nil
	present := map[string]bool{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(s.dir, e.Name())
		present[path] = true
		results[path] = s.refresh(ctx, path)
	}
	s.mu.Lock()
	for path := range s.files {
		if !present[path] {
			delete(s.files, path)
		}
	}
	s.mu.Unlock()
	return results
}

// refresh re-reads one manifest path: a file that is gone (or is a
// directory) forgets its pods, a good file replaces them, a bad one keeps
// them and returns the problem.
func (s *FileSource) refresh(ctx context.Context, path string) error {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.forget(path)
		return nil
	case err != nil:
		return fmt.Errorf("manifest %s: %w", path, err)
	case info.IsDir():
		klog.FromContext(ctx).V(4).Info("Not reading subdirectory of the manifest directory", "path", path)
		s.forget(path)
		return nil
	case !info.Mode().IsRegular():
		s.forget(path)
		return fmt.Errorf("manifest %s: not a regular file (%v)", path, info.Mode().Type())
	}
	data, err := readAtMost(path, MaxManifestBytes)
	if errors.Is(err, fs.ErrNotExist) {
		s.forget(path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("manifest %s: %w", path, err)
	}
	pods, err := DecodeManifest(data, path)
	if err != nil {
		return err
	}
	for _, pod := range pods {
		if err := makeStatic(pod, staticPodOptions{
			nodeName:          s.nodeName,
			source:            s.Name(),
			location:          path,
			tolerateNoExecute: true,
		}); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.files[path] = pods
	s.mu.Unlock()
	return nil
}

func (s *FileSource) forget(path string) {
	s.mu.Lock()
	delete(s.files, path)
	s.mu.Unlock()
}

// snapshot returns copies of the pods in force, ordered by file path.
func (s *FileSource) snapshot() []*v1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	pods := []*v1.Pod{}
	for _, path := range slices.Sorted(maps.Keys(s.files)) {
		for _, pod := range s.files[path] {
			pods = append(pods, pod.DeepCopy())
		}
	}
	return pods
}

// readAtMost reads the file at path, failing if it is larger than limit.
func readAtMost(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, limit)
}

func readLimited(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}
