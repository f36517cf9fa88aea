package logs

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Runtime is what the manager needs of the container runtime.
// *criruntime.Runtime satisfies it.
type Runtime interface {
	// RunningContainerLogs returns the log file of every running
	// container, by container ID.
	RunningContainerLogs(ctx context.Context) (map[string]string, error)
	// ReopenContainerLog makes the runtime write the container's output
	// to a new file at its log path.
	ReopenContainerLog(ctx context.Context, containerID string) error
}

// Config configures a Manager. The zero value means upstream's defaults.
type Config struct {
	// MaxSize in bytes: a running container's log this large or larger is
	// rotated (containerLogMaxSize). 0 means 10Mi; negative turns periodic
	// rotation off (Step does nothing; Rotate still works).
	MaxSize int64
	// MaxFiles is the most log files a container keeps, the current one
	// included (containerLogMaxFiles). 0 means 5; otherwise at least 2.
	MaxFiles int
	// Workers is how many containers are rotated at once
	// (containerLogMaxWorkers). 0 means 1.
	Workers int
	// Interval is the time between Run's steps
	// (containerLogMonitorInterval). 0 means 10s.
	Interval time.Duration
	// Clock names rotated files and ticks Run. Default: the real clock.
	Clock clock.WithTicker
}

// Manager rotates the logs of running containers. Its methods are safe for
// concurrent use; one container's log is never rotated by two calls at once.
type Manager struct {
	cfg Config
	rt  Runtime

	mu   sync.Mutex
	busy map[string]chan struct{} // container ID -> closed when its rotation ends
}

// New checks cfg and returns a Manager over rt.
func New(cfg Config, rt Runtime) (*Manager, error) {
	if rt == nil {
		return nil, errors.New("logs: Runtime is nil")
	}
	if cfg.MaxSize == 0 {
		cfg.MaxSize = 10 << 20
	}
	switch {
	case cfg.MaxFiles == 0:
		cfg.MaxFiles = 5
	case cfg.MaxFiles < 2:
		return nil, fmt.Errorf("logs: Config.MaxFiles is %d, must be at least 2", cfg.MaxFiles)
	}
	switch {
	case cfg.Workers == 0:
		cfg.Workers = 1
	case cfg.Workers < 0:
		return nil, fmt.Errorf("logs: Config.Workers is %d, must be positive", cfg.Workers)
	}
	switch {
	case cfg.Interval == 0:
		cfg.Interval = 10 * time.Second
	case cfg.Interval < 0:
		return nil, fmt.Errorf("logs: Config.Interval is %v, must be positive", cfg.Interval)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Manager{cfg: cfg, rt: rt, busy: map[string]chan struct{}{}}, nil
}

// Policy is the rotation policy in force.
func (m *Manager) Policy() Policy { return Policy{MaxSize: m.cfg.MaxSize, MaxFiles: m.cfg.MaxFiles} }

// Step rotates, once, the log of every running container that has reached
// MaxSize, Workers at a time. A container whose rotation fails does not
// stop the others; the errors are returned joined.
func (m *Manager) Step(ctx context.Context) error {
	if m.cfg.MaxSize < 0 {
		return nil
	}
	paths, err := m.rt.RunningContainerLogs(ctx)
	if err != nil {
		return fmt.Errorf("logs: list running containers: %w", err)
	}
	ids := make(chan string)
	errs := make([]error, 0, len(paths))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range min(m.cfg.Workers, len(paths)) {
		wg.Go(func() {
			for id := range ids {
				if err := m.rotate(ctx, id, paths[id], m.Policy(), false); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for id := range paths {
		ids <- id
	}
	close(ids)
	wg.Wait()
	return errors.Join(errs...)
}

// Run calls Step now and every Interval until ctx ends, logging its
// errors, and returns ctx's error.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting container log rotation", "maxSize", m.cfg.MaxSize, "maxFiles", m.cfg.MaxFiles,
		"workers", m.cfg.Workers, "interval", m.cfg.Interval)
	t := m.cfg.Clock.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		if err := m.Step(ctx); err != nil {
			logger.Error(err, "Container log rotation failed")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
	}
}

// Rotate rotates the log of the running container id now, whatever its
// size (an empty log is left alone), under the same MaxFiles policy.
func (m *Manager) Rotate(ctx context.Context, id string) error {
	paths, err := m.rt.RunningContainerLogs(ctx)
	if err != nil {
		return fmt.Errorf("logs: list running containers: %w", err)
	}
	path, ok := paths[id]
	if !ok {
		return fmt.Errorf("logs: container %s is not running (or has no log)", id)
	}
	return m.rotate(ctx, id, path, Policy{MaxSize: 1, MaxFiles: m.cfg.MaxFiles}, true)
}

// rotate carries out Decide's plan for one container's log. With explicit
// set (Rotate), a postponed rotation is an error; for Step it is not.
func (m *Manager) rotate(ctx context.Context, id, log string, p Policy, explicit bool) error {
	release, err := m.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	logger := klog.FromContext(ctx).WithValues("containerID", id, "path", log)

	fi, err := os.Stat(log)
	if errors.Is(err, os.ErrNotExist) {
		// Someone removed the log: have the runtime create it again.
		if err := m.rt.ReopenContainerLog(ctx, id); err != nil {
			return fmt.Errorf("logs: container %s: log %s is missing and reopening it failed: %w", id, log, err)
		}
		fi, err = os.Stat(log)
	}
	if err != nil {
		return fmt.Errorf("logs: container %s: %w", id, err)
	}
	siblings, err := siblingsOf(log)
	if err != nil {
		return fmt.Errorf("logs: container %s: %w", id, err)
	}
	plan := Decide(log, fi.Size(), siblings, m.cfg.Clock.Now(), p)
	if plan.Postponed {
		logger.V(4).Info("Log rotation postponed: rotated within this second")
		if explicit {
			return fmt.Errorf("logs: container %s: log %s was already rotated within this second; try again", id, log)
		}
		return nil
	}
	if plan.RotateTo == "" {
		return nil
	}
	logger.V(2).Info("Rotating container log", "size", fi.Size(), "maxSize", p.MaxSize, "rotateTo", plan.RotateTo)
	if err := apply(ctx, m.rt, id, log, plan); err != nil {
		return fmt.Errorf("logs: rotate log %s of container %s: %w", log, id, err)
	}
	return nil
}

// apply removes, compresses, renames and has the runtime reopen, in Plan
// order. When the runtime cannot reopen, the log gets its name back so
// the next round retries, as upstream.
func apply(ctx context.Context, rt Runtime, id, log string, plan Plan) error {
	for _, f := range plan.Remove {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	for _, f := range plan.Compress {
		if err := compress(f); err != nil {
			return err
		}
	}
	if err := os.Rename(log, plan.RotateTo); err != nil {
		return err
	}
	if err := rt.ReopenContainerLog(ctx, id); err != nil {
		if rerr := os.Rename(plan.RotateTo, log); rerr != nil {
			return fmt.Errorf("reopen: %w; and renaming %s back failed: %w", err, plan.RotateTo, rerr)
		}
		return fmt.Errorf("reopen: %w", err)
	}
	return nil
}

// compress replaces f by f.gz, written as f.tmp first, so that a crash
// leaves either f or a complete f.gz in use (Decide removes the rest).
func compress(f string) (err error) {
	in, err := os.Open(f)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	tmp := f + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = os.Remove(tmp)
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress %s: %w", f, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress %s: %w", f, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("compress %s: %w", f, err)
	}
	if err := os.Rename(tmp, f+CompressSuffix); err != nil {
		return err
	}
	return os.Remove(f)
}

// siblingsOf lists the files beside log whose names begin with log's name
// and a dot: its rotated files and leftovers.
func siblingsOf(log string) ([]string, error) {
	dir, base := filepath.Split(log)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasPrefix(e.Name(), base+".") {
			out = append(out, log+strings.TrimPrefix(e.Name(), base))
		}
	}
	return out, nil
}

// acquire marks id's log as being rotated, waiting for a rotation already
// under way to end first.
func (m *Manager) acquire(ctx context.Context, id string) (release func(), err error) {
	for {
		m.mu.Lock()
		done, busy := m.busy[id]
		if !busy {
			done = make(chan struct{})
			m.busy[id] = done
			m.mu.Unlock()
			return func() {
				m.mu.Lock()
				delete(m.busy, id)
				m.mu.Unlock()
				close(done)
			}, nil
		}
		m.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("logs: waiting to rotate the log of container %s: %w", id, context.Cause(ctx))
		}
	}
}
