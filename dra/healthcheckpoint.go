package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// HealthCheckpointFile is the device health checkpoint under the root
// directory, upstream kubelet's name and format: a JSON object of driver
// name to {"Devices": {"POOL/DEVICE": {PoolName, DeviceName, Health,
// LastUpdated, HealthCheckTimeout (ns), Message}}}. It is written on every
// change and read at start-up: an agent killed and restarted keeps the
// health until the drivers report again (an entry older than its timeout
// reads Unknown). A driver's stream ending (a clean stop too) clears its
// devices, as upstream.
const HealthCheckpointFile = "dra_health_state"

type healthFileDevice struct {
	PoolName           string
	DeviceName         string
	Health             v1.ResourceHealthStatus
	LastUpdated        time.Time
	HealthCheckTimeout time.Duration
	Message            string
}

type healthFileDriver struct {
	Devices map[string]healthFileDevice
}

// load reads the checkpoint at s.path; a missing file is an empty store.
// s.mu need not be held: it runs before the store is shared.
func (s *healthStore) load() error {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", s.path, err)
	}
	var file map[string]healthFileDriver
	if err := json.Unmarshal(b, &file); err != nil {
		return fmt.Errorf("DRA health checkpoint %s: %w", s.path, err)
	}
	for driver, st := range file {
		devs := map[healthKey]deviceHealth{}
		for _, d := range st.Devices {
			timeout := d.HealthCheckTimeout
			if timeout <= 0 {
				timeout = DefaultHealthTimeout
			}
			devs[healthKey{d.PoolName, d.DeviceName}] = deviceHealth{health: d.Health, message: d.Message, updated: d.LastUpdated, timeout: timeout}
		}
		s.drivers[driver] = devs
	}
	return nil
}

// saveLocked writes the checkpoint; s.mu must be held.
func (s *healthStore) saveLocked() error {
	if s.path == "" {
		return nil
	}
	file := make(map[string]healthFileDriver, len(s.drivers))
	for driver, devs := range s.drivers {
		st := healthFileDriver{Devices: make(map[string]healthFileDevice, len(devs))}
		for k, d := range devs {
			st.Devices[k.pool+"/"+k.device] = healthFileDevice{PoolName: k.pool, DeviceName: k.device, Health: d.health,
				LastUpdated: d.updated, HealthCheckTimeout: d.timeout, Message: d.message}
		}
		file[driver] = st
	}
	b, err := json.Marshal(file)
	if err != nil {
		return fmt.Errorf("encode DRA health checkpoint: %w", err)
	}
	if err := fsutil.WriteFileAtomic(s.path, b, 0o600); err != nil {
		return fmt.Errorf("write DRA health checkpoint: %w", err)
	}
	return nil
}
