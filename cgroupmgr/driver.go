package cgroupmgr

import (
	"context"
)

// Driver creates, sizes and removes cgroups by name. The Manager uses one;
// the built-in ones are picked by Config.Driver, and Config.Backend takes
// any other (a fake in tests, a driver of a vendor's own). The literal
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

// closer is the optional Driver capability Manager.Close releases (the
// systemd driver's D-Bus connection).
type closer interface {
	Close()
}
