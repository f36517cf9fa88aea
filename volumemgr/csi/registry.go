package csi

import (
	"fmt"
	"sync"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Driver is a registered CSI driver.
type Driver struct {
	// Endpoint is the driver's CSI socket.
	Endpoint string
	// Version is the highest CSI version the driver said it supports.
	Version *utilversion.Version
}

// Drivers is the registry of CSI drivers on the node, by name. Handler
// fills it; Plugin reads it. It is safe for concurrent use.
type Drivers struct {
	mu sync.RWMutex
	m  map[string]Driver
}

// NewDrivers returns an empty registry.
func NewDrivers() *Drivers { return &Drivers{m: map[string]Driver{}} }

// Get returns the driver registered as name.
func (d *Drivers) Get(name string) (Driver, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	drv, ok := d.m[name]
	return drv, ok
}

func (d *Drivers) set(name string, drv Driver) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.m[name] = drv
}

func (d *Drivers) remove(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, name)
}

// endpoint returns the socket of driver name, with upstream's error when it
// is not registered.
func (d *Drivers) endpoint(name string) (string, error) {
	drv, ok := d.Get(name)
	if !ok {
		return "", fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
	}
	return drv.Endpoint, nil
}
