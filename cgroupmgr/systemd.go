package cgroupmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultSystemdBus is the system bus, where kubelet finds systemd.
const DefaultSystemdBus = "unix:path=/run/dbus/system_bus_socket"

// systemdJobTimeout bounds the wait for a unit job, as upstream's 30s.
const systemdJobTimeout = 30 * time.Second

// systemd's D-Bus error names the driver acts on.
const (
	errUnitExists = "org.freedesktop.systemd1.UnitExists"
	errNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
)

// systemdDriver is the systemd cgroup driver: every cgroup is a slice
// unit, created over D-Bus as a transient unit, sized by its unit
// properties and stopped to remove it; systemd makes and removes the
// directories of the controllers it manages. As upstream's systemd
// manager, it writes the same limits to the cgroup files too (through an
// fsDriver laid out as systemd's slices), which also covers what systemd
// has no property for (huge pages; on v1 the cpuset and other
// hierarchies systemd does not manage), and reads existence, children
// and usage from the files.
type systemdDriver struct {
	fs      *fsDriver
	bus     string
	version Version
	clock   clock.Clock

	mu        sync.Mutex
	conn      *sddbus.Conn
	sdVersion int
}

var (
	_ Driver     = (*systemdDriver)(nil)
	_ memoryUser = (*systemdDriver)(nil)
)

// newSystemdDriver connects to systemd at cfg.SystemdBus and lays out
// its file view below cfg.SystemdCgroupBase.
func newSystemdDriver(ctx context.Context, cfg Config) (*systemdDriver, error) {
	fsd, err := newFSDriver(cfg.Root, cfg.Version, cfg.KillProcess, cfg.Clock)
	if err != nil {
		return nil, err
	}
	if err := fsd.checkControllers(); err != nil {
		return nil, err
	}
	base := ParseCgroupfs(cfg.SystemdCgroupBase)
	fsd.layout = func(name CgroupName) []string { return systemdLayout(base, name) }
	bus := cfg.SystemdBus
	if bus == "" {
		bus = DefaultSystemdBus
	}
	d := &systemdDriver{fs: fsd, bus: bus, version: fsd.version, clock: cfg.Clock}
	if _, err := d.connection(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// systemdLayout is name's path components as systemd's nested slices
// below base: {"kubepods", "burstable"} below {"ns"} is
// ns/kubepods.slice/kubepods-burstable.slice.
func systemdLayout(base, name CgroupName) []string {
	parts := append([]string{}, base...)
	if len(name) == 0 {
		return parts
	}
	return append(parts, strings.Split(strings.TrimPrefix(name.ToSystemd(), "/"), "/")...)
}

// connection returns the D-Bus connection to systemd, dialling it (and
// reading systemd's version) when there is none or it was closed.
func (d *systemdDriver) connection(ctx context.Context) (*sddbus.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil && d.conn.Connected() {
		return d.conn, nil
	}
	conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) { return dialSystemdBus(d.bus) })
	if err != nil {
		return nil, fmt.Errorf("cgroupmgr: cgroupDriver %q: connect to systemd at %s (Config.SystemdBus): %w", DriverSystemd, d.bus, err)
	}
	v, err := conn.GetManagerProperty("Version")
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("cgroupmgr: cgroupDriver %q: systemd at %s: read its version: %w", DriverSystemd, d.bus, err)
	}
	d.sdVersion = parseSystemdVersion(v)
	klog.FromContext(ctx).V(2).Info("Connected to systemd", "bus", d.bus, "version", v)
	if d.conn != nil {
		d.conn.Close()
	}
	d.conn = conn
	return conn, nil
}

// dialSystemdBus opens a bus connection at address, authenticated as this
// uid (EXTERNAL) and registered (Hello). godbus closes a connection whose
// context ends, so it gets none: the driver keeps it for its lifetime.
func dialSystemdBus(address string) (*dbus.Conn, error) {
	conn, err := dbus.Dial(address)
	if err != nil {
		return nil, err
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, err
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// parseSystemdVersion reads the leading number of systemd's Version
// property ("\"252.38-1~deb12u1\"" is 252); 0 when there is none.
func parseSystemdVersion(v string) int {
	v = strings.Trim(v, "\"")
	end := 0
	for end < len(v) && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(v[:end])
	return n
}

// call runs f on the connection, once more on a fresh connection when the
// old one turns out closed (systemd or the bus restarted).
func (d *systemdDriver) call(ctx context.Context, f func(*sddbus.Conn) error) error {
	conn, err := d.connection(ctx)
	if err != nil {
		return err
	}
	if err = f(conn); errors.Is(err, dbus.ErrClosed) {
		conn.Close()
		if conn, err = d.connection(ctx); err != nil {
			return err
		}
		err = f(conn)
	}
	return err
}

// wait waits for a unit job's result; anything but "done" is an error.
func (d *systemdDriver) wait(ctx context.Context, what, unit string, ch <-chan string) error {
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("cgroupmgr: systemd: %s %s: job %s", what, unit, res)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cgroupmgr: systemd: %s %s: %w", what, unit, ctx.Err())
	case <-d.clock.After(systemdJobTimeout):
		return fmt.Errorf("cgroupmgr: systemd: %s %s: no job result within %v", what, unit, systemdJobTimeout)
	}
}

func dbusErrorName(err error) string {
	var de dbus.Error
	if errors.As(err, &de) {
		return de.Name
	}
	var dep *dbus.Error
	if errors.As(err, &dep) {
		return dep.Name
	}
	return ""
}

// Apply starts name's slice as a transient unit unless it is loaded, sets
// rc as its unit properties, then writes rc to the cgroup files.
func (d *systemdDriver) Apply(ctx context.Context, name CgroupName, rc *ResourceConfig) error {
	if rc == nil {
		rc = &ResourceConfig{}
	}
	if len(name) == 0 {
		// The root slice is systemd's; only its files are written.
		return d.fs.Apply(ctx, name, rc)
	}
	unit, _ := sliceUnits(name)
	ch := make(chan string, 1)
	err := d.call(ctx, func(c *sddbus.Conn) error {
		_, err := c.StartTransientUnitContext(ctx, unit, "replace", sliceProperties(name, d.version), ch)
		return err
	})
	switch {
	case err == nil:
		if err := d.wait(ctx, "start", unit, ch); err != nil {
			_ = d.call(ctx, func(c *sddbus.Conn) error { return c.ResetFailedUnitContext(ctx, unit) })
			return err
		}
	case dbusErrorName(err) == errUnitExists:
		if err := d.startLoaded(ctx, unit); err != nil {
			return err
		}
	default:
		return fmt.Errorf("cgroupmgr: systemd: start %s: %w", unit, err)
	}
	d.mu.Lock()
	sdVersion := d.sdVersion
	d.mu.Unlock()
	props, files := resourceProperties(rc, d.version, sdVersion)
	if len(props) > 0 {
		if err := d.call(ctx, func(c *sddbus.Conn) error { return c.SetUnitPropertiesContext(ctx, unit, true, props...) }); err != nil {
			return fmt.Errorf("cgroupmgr: systemd: set properties of %s: %w", unit, err)
		}
	}
	return d.fs.Apply(ctx, name, files)
}

// startLoaded starts a slice systemd already has loaded but not active
// (stopped, and not yet collected).
func (d *systemdDriver) startLoaded(ctx context.Context, unit string) error {
	var state string
	if err := d.call(ctx, func(c *sddbus.Conn) error {
		p, err := c.GetUnitPropertyContext(ctx, unit, "ActiveState")
		if err == nil {
			state, _ = p.Value.Value().(string)
		}
		return err
	}); err != nil {
		return fmt.Errorf("cgroupmgr: systemd: state of %s: %w", unit, err)
	}
	if state == "active" {
		return nil
	}
	ch := make(chan string, 1)
	if err := d.call(ctx, func(c *sddbus.Conn) error {
		_, err := c.StartUnitContext(ctx, unit, "replace", ch)
		return err
	}); err != nil {
		return fmt.Errorf("cgroupmgr: systemd: start %s (%s): %w", unit, state, err)
	}
	return d.wait(ctx, "start", unit, ch)
}

// Exists reports whether name's cgroup directories are all there.
func (d *systemdDriver) Exists(ctx context.Context, name CgroupName) (bool, error) {
	return d.fs.Exists(ctx, name)
}

// Children lists the components of name's child slices: in
// "kubepods-burstable.slice", "kubepods-burstable-pod12_34.slice" is
// "pod12-34". Other directories there (scopes of containers) are not
// children.
func (d *systemdDriver) Children(ctx context.Context, name CgroupName) ([]string, error) {
	dirs, err := d.fs.Children(ctx, name)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, dir := range dirs {
		if !strings.HasSuffix(dir, systemdSliceSuffix) {
			continue
		}
		child := ParseSystemd(dir)
		if len(child) != len(name)+1 || !slicesEqual(child[:len(name)], name) {
			continue
		}
		out = append(out, child[len(name)])
	}
	sort.Strings(out)
	return out, nil
}

func slicesEqual(a, b CgroupName) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// MemoryUsage is the memory charged to name, from its files.
func (d *systemdDriver) MemoryUsage(ctx context.Context, name CgroupName) (int64, error) {
	return d.fs.MemoryUsage(ctx, name)
}

// Destroy kills what still runs in name (upstream kills a pod cgroup's
// processes before destroying it: a container's init ignores the SIGTERM
// systemd would send, and the stop would wait out its timeout), stops
// name's slice (systemd removes the directories it made), resets it if
// it failed, then removes what is left, as upstream. A slice systemd does
// not know is no error.
func (d *systemdDriver) Destroy(ctx context.Context, name CgroupName) error {
	if len(name) == 0 {
		return errors.New("cgroupmgr: refusing to destroy the root cgroup")
	}
	if err := d.fs.killAll(ctx, name, d.fs.dirs(name)); err != nil {
		return fmt.Errorf("cgroupmgr: destroy %s: %w", d.fs.rel(name), err)
	}
	unit, _ := sliceUnits(name)
	ch := make(chan string, 1)
	err := d.call(ctx, func(c *sddbus.Conn) error {
		_, err := c.StopUnitContext(ctx, unit, "replace", ch)
		return err
	})
	switch {
	case err == nil:
		if err := d.wait(ctx, "stop", unit, ch); err != nil {
			klog.FromContext(ctx).Info("Stopping a slice did not finish cleanly; removing its cgroup", "unit", unit, "err", err)
		}
		_ = d.call(ctx, func(c *sddbus.Conn) error { return c.ResetFailedUnitContext(ctx, unit) })
	case dbusErrorName(err) == errNoSuchUnit:
	default:
		return fmt.Errorf("cgroupmgr: systemd: stop %s: %w", unit, err)
	}
	return d.fs.Destroy(ctx, name)
}

// Close closes the D-Bus connection.
func (d *systemdDriver) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
}
