package dra

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	"k8s.io/utils/clock"
)

// DefaultHealthTimeout is how long a device's reported health holds when
// the driver gives no timeout of its own, as upstream kubelet: a device
// not reported again within it reads Unknown.
const DefaultHealthTimeout = 30 * time.Second

// maxHealthDevices bounds the devices kept per driver, as upstream: the
// reports are not checked against the ResourceSlices, so a driver
// inventing ever-new device names must not grow the store without end.
// Known devices are always updated; new ones beyond it are dropped.
const maxHealthDevices = 16384

// deviceHealth is the last health a driver reported for one device.
type deviceHealth struct {
	health  v1.ResourceHealthStatus
	message string
	// updated is when nodekit received the report (not the driver's own
	// time, as upstream), timeout how long it holds.
	updated time.Time
	timeout time.Duration
}

// healthKey names a device of a driver.
type healthKey struct{ pool, device string }

// healthStore holds the device health the drivers report, by driver,
// pool and device. It is safe for concurrent use.
type healthStore struct {
	clock clock.PassiveClock
	// path is the checkpoint (HealthCheckpointFile); "" keeps none.
	path    string
	mu      sync.Mutex
	drivers map[string]map[healthKey]deviceHealth
}

// newHealthStore restores the checkpoint at path ("" is none). A
// checkpoint that cannot be read leaves the store empty, as upstream,
// and is returned as the error beside the store.
func newHealthStore(c clock.PassiveClock, path string) (*healthStore, error) {
	s := &healthStore{clock: c, path: path, drivers: map[string]map[healthKey]deviceHealth{}}
	if path == "" {
		return s, nil
	}
	if err := s.load(); err != nil {
		s.drivers = map[string]map[healthKey]deviceHealth{}
		return s, err
	}
	return s, nil
}

// get returns the health of a device: Unknown without a message when the
// driver never reported it or its report is older than its timeout.
func (s *healthStore) get(driver, pool, device string) (v1.ResourceHealthStatus, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.drivers[driver][healthKey{pool, device}]
	if !ok || s.clock.Since(d.updated) > d.timeout {
		return v1.ResourceHealthStatusUnknown, ""
	}
	return d.health, d.message
}

// update records one report of driver and returns the devices whose
// health, message or timeout changed. Devices the report leaves out keep
// their health until their timeout has passed; then they read Unknown
// (a change, unless they were Unknown already) and are forgotten, as
// upstream. A change is checkpointed; err is a failed write.
func (s *healthStore) update(driver string, report []*drahealthv1.DeviceHealth) (changed []healthKey, dropped int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	devs := s.drivers[driver]
	if devs == nil {
		devs = map[healthKey]deviceHealth{}
		s.drivers[driver] = devs
	}
	seen := map[healthKey]bool{}
	forgot := false
	for _, r := range report {
		k := healthKey{r.GetDevice().GetPoolName(), r.GetDevice().GetDeviceName()}
		seen[k] = true
		next := deviceHealth{health: resourceHealth(r.GetHealth()), message: truncateMessage(r.GetMessage()),
			updated: now, timeout: DefaultHealthTimeout}
		if secs := r.GetHealthCheckTimeoutSeconds(); secs > 0 {
			next.timeout = time.Duration(secs) * time.Second
		}
		old, known := devs[k]
		if !known && len(devs) >= maxHealthDevices {
			dropped++
			continue
		}
		if !known || old.health != next.health || old.message != next.message || old.timeout != next.timeout {
			changed = append(changed, k)
		}
		devs[k] = next
	}
	for k, d := range devs {
		if seen[k] || now.Sub(d.updated) <= d.timeout {
			continue
		}
		if d.health != v1.ResourceHealthStatusUnknown {
			changed = append(changed, k)
		}
		delete(devs, k)
		forgot = true
	}
	if len(changed) > 0 || forgot {
		err = s.saveLocked()
	}
	return changed, dropped, err
}

// clear forgets every device of driver (its health stream ended),
// checkpoints, and returns them.
func (s *healthStore) clear(driver string) ([]healthKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []healthKey
	for k := range s.drivers[driver] {
		out = append(out, k)
	}
	if _, ok := s.drivers[driver]; !ok {
		return nil, nil
	}
	delete(s.drivers, driver)
	return out, s.saveLocked()
}

func resourceHealth(h drahealthv1.HealthStatus) v1.ResourceHealthStatus {
	switch h {
	case drahealthv1.HealthStatus_HEALTHY:
		return v1.ResourceHealthStatusHealthy
	case drahealthv1.HealthStatus_UNHEALTHY:
		return v1.ResourceHealthStatusUnhealthy
	default:
		return v1.ResourceHealthStatusUnknown
	}
}

// truncateMessage cuts a message longer than the API allows to its limit,
// ending in "...", as upstream.
func truncateMessage(msg string) string {
	if len(msg) <= v1.ResourceHealthMessageMaxLength {
		return msg
	}
	return msg[:v1.ResourceHealthMessageMaxLength-3] + "..."
}
