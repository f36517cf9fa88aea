package dratest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/clock"
)

// HealthFile is the file in the state dir that sets the devices' health:
// a JSON object of device name ("dev-0") to DeviceHealth. A device it
// does not name, or every device without the file, is Healthy.
const HealthFile = "health.json"

// DeviceHealth is what HealthFile says of one device.
type DeviceHealth struct {
	Health  v1.ResourceHealthStatus `json:"health"` // Healthy, Unhealthy or Unknown
	Message string                  `json:"message,omitempty"`
}

// Health reporting: the file is read every healthPoll; a report of every
// device is sent when it changed, and every healthResend anyway, well
// within the agent's default 30 s timeout.
const (
	healthPoll   = 100 * time.Millisecond
	healthResend = 10 * time.Second
)

// WriteHealth replaces the health file in dir (a driver's state dir)
// atomically, so the driver never reads half of it.
func WriteHealth(dir string, devices map[string]DeviceHealth) error {
	data, err := json.Marshal(devices)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, HealthFile), data)
}

// readHealth reads the health file; none is an empty map.
func (d *Driver) readHealth() (map[string]DeviceHealth, error) {
	b, err := os.ReadFile(filepath.Join(d.cfg.StateDir, HealthFile))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]DeviceHealth{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]DeviceHealth{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", HealthFile, err)
	}
	return out, nil
}

// healthReport is the report of every device of the slice under set.
func (d *Driver) healthReport(set map[string]DeviceHealth, now time.Time) kubeletplugin.DeviceHealthReport {
	var r kubeletplugin.DeviceHealthReport
	for i := range d.cfg.Devices {
		name := fmt.Sprintf("dev-%d", i)
		h := kubeletplugin.HealthStatusHealthy
		var msg string
		if s, ok := set[name]; ok {
			h, msg = kubeletplugin.HealthStatus(s.Health), s.Message
		}
		r.Devices = append(r.Devices, kubeletplugin.DeviceHealth{PoolName: d.cfg.NodeName, DeviceName: name, Health: h, LastUpdated: now, Message: msg})
	}
	return r
}

// WatchHealthStatus reports the health the health file sets: at once,
// on every change, and every healthResend, until ctx is done. A file it
// cannot read is reported through HandleError and keeps the last health.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	c := d.clock
	if c == nil {
		c = clock.RealClock{}
	}
	var last map[string]DeviceHealth
	var sent time.Time
	first := true
	tick := c.NewTicker(healthPoll)
	defer tick.Stop()
	for {
		set, err := d.readHealth()
		if err != nil {
			d.HandleError(ctx, err, "reading the device health file")
			set = last
		}
		if first || !maps.Equal(set, last) || c.Since(sent) >= healthResend {
			select {
			case reports <- d.healthReport(set, c.Now()):
				last, sent, first = set, c.Now(), false
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
	}
}
