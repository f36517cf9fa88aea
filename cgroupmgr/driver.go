package cgroupmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// Driver creates, sizes and removes cgroups by name. The Manager uses one;
// the built-in ones are picked by Config.Driver, and Config.Backend takes
// any other (a systemd driver over D-Bus, a fake in tests). The literal
// path handed to the runtime follows Config.Driver either way.
type Driver interface {
	// Apply creates name, and any missing ancestor, where missing, then
	// writes rc to it.
	Apply(ctx context.Context, name CgroupName, rc *ResourceConfig) error
	// Exists reports whether name exists wherever the driver keeps it (in
	// every hierarchy that matters, on cgroup v1).
	Exists(ctx context.Context, name CgroupName) (bool, error)
	// Children lists the components of name's direct children found
	// anywhere, sorted, without duplicates; none for a missing name.
	Children(ctx context.Context, name CgroupName) ([]string, error)
	// Destroy kills every process left in name and below it, then removes
	// name and its descendants, deepest first. A missing name is no error.
	Destroy(ctx context.Context, name CgroupName) error
}

// memoryUser is the optional Driver capability the QoS memory reservation
// needs to back off to current usage.
type memoryUser interface {
	MemoryUsage(ctx context.Context, name CgroupName) (int64, error)
}

// ErrSystemdUnsupported is returned by every call of the built-in systemd
// driver.
var ErrSystemdUnsupported = errors.New("systemd cgroup driver not supported")

// systemdDriver stands behind Driver for cgroupDriver "systemd". Creating
// slices takes systemd's D-Bus API, which this package does not speak: on
// a machine without systemd it says so; where systemd runs, plug a D-Bus
// Driver in Config.Backend (or use cgroupDriver "cgroupfs").
type systemdDriver struct{ err error }

var _ Driver = systemdDriver{}

const systemdBusSocket = "/run/dbus/system_bus_socket"

func newSystemdDriver() systemdDriver {
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return systemdDriver{fmt.Errorf("cgroupmgr: %w on this machine: systemd is not running (no /run/systemd/system) and so there is no systemd D-Bus to create slices with; use cgroupDriver %q", ErrSystemdUnsupported, DriverCgroupfs)}
	}
	if _, err := os.Stat(systemdBusSocket); err != nil {
		return systemdDriver{fmt.Errorf("cgroupmgr: %w on this machine: no D-Bus system bus at %s; use cgroupDriver %q", ErrSystemdUnsupported, systemdBusSocket, DriverCgroupfs)}
	}
	return systemdDriver{fmt.Errorf("cgroupmgr: %w by this package: it does not speak systemd's D-Bus API; set Config.Backend to a Driver that does, or use cgroupDriver %q", ErrSystemdUnsupported, DriverCgroupfs)}
}

func (d systemdDriver) Apply(context.Context, CgroupName, *ResourceConfig) error { return d.err }
func (d systemdDriver) Exists(context.Context, CgroupName) (bool, error)         { return false, d.err }
func (d systemdDriver) Children(context.Context, CgroupName) ([]string, error)   { return nil, d.err }
func (d systemdDriver) Destroy(context.Context, CgroupName) error                { return d.err }
