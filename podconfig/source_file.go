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
	logger := klog.FromContext(ctx)
	rep := newReporter(s.o.onError)

	var w *fsnotify.Watcher
	startWatch := func() {
		if w != nil || s.noWatch {
			return
		}
		nw, err := fsnotify.NewWatcher()
		if err == nil {
			if err = nw.Add(s.dir); err != nil {
				_ = nw.Close()
			}
		}
		if err != nil {
			rep.report(ctx, "inotify", fmt.Errorf("watch %s (re-reading every %v instead): %w", s.dir, s.o.period, err))
			return
		}
		rep.clear("inotify")
		w = nw
	}
	stopWatch := func() {
		if w != nil {
			_ = w.Close()
			w = nil
		}
	}
	defer stopWatch()

	var sent []*v1.Pod // a copy of the last SET
	first := true
	send := func() bool {
		pods := s.snapshot()
		if !first && equality.Semantic.DeepEqual(pods, sent) {
			return true
		}
		keep := copyPods(pods)
		select {
		case out <- nodekit.PodUpdate{Op: nodekit.SET, Pods: pods, Source: s.Name()}:
			first, sent = false, keep
			return true
		case <-ctx.Done():
			return false
		}
	}
	reportAll := func(results map[string]error) {
		for _, path := range slices.Sorted(maps.Keys(results)) {
			if err := results[path]; err != nil {
				rep.report(ctx, path, err)
			} else if rep.clear(path) {
				logger.Info("Manifest problem resolved", "path", path)
			}
		}
	}
	handle := func(ev fsnotify.Event) {
		path := filepath.Clean(ev.Name)
		switch {
		case path == s.dir:
			// The directory (or single file) itself went away or was
			// replaced, and its watch with it: re-read, watch again (or,
			// if it is not back yet, on a later tick).
			stopWatch()
			reportAll(s.rescan(ctx))
			startWatch()
		case strings.HasPrefix(filepath.Base(path), "."):
		default:
			reportAll(map[string]error{path: s.refresh(ctx, path)})
		}
	}

	// Watch before the first read, so no change between the two is missed.
	startWatch()
	// The timer is armed before each send, so a receiver that has the SET
	// knows the next re-read is already scheduled.
	timer := s.clock.NewTimer(s.o.period)
	defer timer.Stop()
	reportAll(s.rescan(ctx))
	if !send() {
		return ctx.Err()
	}
	for {
		var events <-chan fsnotify.Event
		var errs <-chan error
		if w != nil {
			events, errs = w.Events, w.Errors
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C():
			timer.Reset(s.o.period)
			startWatch()
			reportAll(s.rescan(ctx))
		case ev, ok := <-events:
			if !ok {
				stopWatch()
				continue
			}
			handle(ev)
			// Take the rest of a burst (create, write, chmod) before sending.
			for drained := false; !drained && w != nil; {
				select {
				case ev, ok := <-w.Events:
					if !ok {
						stopWatch()
					} else {
						handle(ev)
					}
				default:
					drained = true
				}
			}
		case err, ok := <-errs:
			if !ok {
				stopWatch()
				continue
			}
			// An overflow lost events; any other error may have too.
			rep.report(ctx, "inotify", fmt.Errorf("watch %s: %w", s.dir, err))
			reportAll(s.rescan(ctx))
		}
		if !send() {
			return ctx.Err()
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
