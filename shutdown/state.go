package shutdown

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// StateFileName is upstream kubelet's file, in its root directory, with
// the start and end of the last graceful shutdown.
const StateFileName = "graceful_node_shutdown_state"

// State is the last graceful shutdown, as upstream writes it: StartTime
// when Shutdown begins (EndTime zero), both once it is done.
type State struct {
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
}

// LoadState reads path; a missing file is the zero State.
func LoadState(path string) (State, error) {
	var s State
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("shutdown: Config.StateFile: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("shutdown: Config.StateFile %s: %w", path, err)
	}
	return s, nil
}

// storeState replaces path atomically (fsutil.WriteFileAtomic).
func storeState(path string, s State) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(path, b, 0o644); err != nil {
		return fmt.Errorf("shutdown: Config.StateFile: %w", err)
	}
	return nil
}

// record stores s and reports it to Config.Times; failures are logged,
// as upstream.
func (m *Manager) record(ctx context.Context, s State) {
	if m.cfg.StateFile != "" {
		if err := storeState(m.cfg.StateFile, s); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to store graceful shutdown state")
		}
	}
	if m.cfg.Times != nil {
		m.cfg.Times(s)
	}
}

// loadRecorded reports the stored state to Config.Times, as upstream sets
// its metrics when the manager starts.
func (m *Manager) loadRecorded(ctx context.Context) {
	if m.cfg.StateFile == "" || m.cfg.Times == nil {
		return
	}
	s, err := LoadState(m.cfg.StateFile)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to load graceful shutdown state")
		return
	}
	m.cfg.Times(s)
}
