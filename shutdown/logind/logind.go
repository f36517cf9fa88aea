package logind

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/shutdown"
)

// Defaults, as upstream kubelet.
const (
	DefaultConfigDir = "/etc/systemd/logind.conf.d"
	DropInName       = "99-kubelet.conf"
	DefaultWho       = "kubelet"
	DefaultWhy       = "Kubelet needs time to handle node shutdown"

	login1Service   = "org.freedesktop.login1"
	login1Path      = dbus.ObjectPath("/org/freedesktop/login1")
	login1Manager   = "org.freedesktop.login1.Manager"
	systemdService  = "org.freedesktop.systemd1"
	systemdPath     = dbus.ObjectPath("/org/freedesktop/systemd1")
	logindUnit      = "systemd-logind.service"
	reconnectPeriod = time.Second
)

// Config configures New.
type Config struct {
	// BusAddress is the system bus; "" is the host's
	// (DBUS_SYSTEM_BUS_ADDRESS, else /run/dbus/system_bus_socket).
	BusAddress string
	// ConfigDir is where the InhibitDelayMaxSec drop-in goes; "" is
	// DefaultConfigDir.
	ConfigDir string
	// GracePeriod is the total shutdown grace period; logind's
	// InhibitDelayMaxSec is raised to it when smaller. 0 changes nothing.
	GracePeriod time.Duration
	// Who and Why describe the lock; "" is DefaultWho / DefaultWhy.
	Who, Why string
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// Trigger is the logind shutdown trigger. Its methods are safe for
// concurrent use; Watch may be called once.
type Trigger struct {
	cfg Config

	mu    sync.Mutex
	lock  int // the inhibitor lock's fd, -1 when none is held
	delay time.Duration
}

var (
	_ shutdown.Trigger  = (*Trigger)(nil)
	_ shutdown.Releaser = (*Trigger)(nil)
)

// New returns a Trigger; nothing is dialled before Watch.
func New(cfg Config) *Trigger {
	if cfg.ConfigDir == "" {
		cfg.ConfigDir = DefaultConfigDir
	}
	if cfg.Who == "" {
		cfg.Who = DefaultWho
	}
	if cfg.Why == "" {
		cfg.Why = DefaultWhy
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Trigger{cfg: cfg, lock: -1}
}

// InhibitDelay is logind's InhibitDelayMaxUSec as last read by Watch.
func (t *Trigger) InhibitDelay() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.delay
}

// Holding reports whether an inhibitor lock is held.
func (t *Trigger) Holding() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lock >= 0
}

// Release closes the inhibitor lock, if one is held.
func (t *Trigger) Release(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lock < 0 {
		return nil
	}
	fd := t.lock
	t.lock = -1
	if err := syscall.Close(fd); err != nil {
		return fmt.Errorf("logind: close the inhibitor lock: %w", err)
	}
	klog.FromContext(ctx).V(1).Info("Released the logind shutdown inhibitor lock")
	return nil
}

// Watch sets logind up (InhibitDelayMaxSec, the lock, the signal match)
// and reports PrepareForShutdown. The first setup's error is returned;
// later ones (after a dropped connection) are logged and retried.
func (t *Trigger) Watch(ctx context.Context) (<-chan bool, error) {
	conn, signals, err := t.setup(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan bool, 1)
	go t.loop(ctx, conn, signals, out)
	return out, nil
}

// loop forwards signals to out, and re-makes the connection when it drops.
func (t *Trigger) loop(ctx context.Context, conn *dbus.Conn, signals chan *dbus.Signal, out chan<- bool) {
	logger := klog.FromContext(ctx)
	defer close(out)
	defer func() { _ = t.Release(context.WithoutCancel(ctx)) }()
	for {
		if conn != nil {
			t.forward(ctx, conn, signals, out)
			_ = conn.Close()
			conn = nil
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.cfg.Clock.After(reconnectPeriod):
		}
		logger.V(1).Info("Restarting watch for node shutdown events (logind)")
		var err error
		if conn, signals, err = t.setup(ctx); err != nil {
			logger.Error(err, "Unable to watch the node for shutdown events (logind)")
		}
	}
}

// forward relays PrepareForShutdown until ctx ends or the bus drops.
func (t *Trigger) forward(ctx context.Context, conn *dbus.Conn, signals chan *dbus.Signal, out chan<- bool) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case sig, ok := <-signals:
			if !ok {
				logger.Error(nil, "Lost the system bus; stopped watching for node shutdown events (logind)")
				return
			}
			if sig == nil || sig.Name != login1Manager+".PrepareForShutdown" || len(sig.Body) == 0 {
				continue
			}
			begins, ok := sig.Body[0].(bool)
			if !ok {
				logger.Error(nil, "PrepareForShutdown carries no bool", "body", sig.Body)
				continue
			}
			if !begins {
				// Cancelled: hold a lock again for the next shutdown.
				if err := t.inhibit(ctx, conn); err != nil {
					logger.Error(err, "Could not take a new inhibitor lock after a cancelled shutdown")
				}
			}
			select {
			case out <- begins:
			case <-ctx.Done():
				return
			}
		}
	}
}

// setup dials the bus, makes InhibitDelayMaxSec large enough, takes the
// lock and subscribes to PrepareForShutdown.
func (t *Trigger) setup(ctx context.Context) (*dbus.Conn, chan *dbus.Signal, error) {
	conn, err := t.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = conn.Close()
		}
	}()
	if err := t.ensureDelay(ctx, conn); err != nil {
		return nil, nil, err
	}
	if err := t.inhibit(ctx, conn); err != nil {
		return nil, nil, err
	}
	if err := conn.AddMatchSignalContext(ctx, dbus.WithMatchObjectPath(login1Path),
		dbus.WithMatchInterface(login1Manager), dbus.WithMatchMember("PrepareForShutdown")); err != nil {
		_ = t.Release(ctx)
		return nil, nil, fmt.Errorf("logind: watch PrepareForShutdown: %w", err)
	}
	signals := make(chan *dbus.Signal, 4)
	conn.Signal(signals)
	ok = true
	return conn, signals, nil
}

func (t *Trigger) dial(ctx context.Context) (*dbus.Conn, error) {
	var conn *dbus.Conn
	var err error
	if t.cfg.BusAddress == "" {
		conn, err = dbus.ConnectSystemBus(dbus.WithContext(ctx))
	} else {
		conn, err = dbus.Connect(t.cfg.BusAddress, dbus.WithContext(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("logind: connect to the system bus %q: %w", t.cfg.BusAddress, err)
	}
	return conn, nil
}

// inhibit takes a new delay lock for "shutdown", closing the one held.
func (t *Trigger) inhibit(ctx context.Context, conn *dbus.Conn) error {
	var fd dbus.UnixFD
	err := conn.Object(login1Service, login1Path).CallWithContext(ctx, login1Manager+".Inhibit", 0,
		"shutdown", t.cfg.Who, t.cfg.Why, "delay").Store(&fd)
	if err != nil {
		return fmt.Errorf("logind: take a shutdown inhibitor lock: %w", err)
	}
	t.mu.Lock()
	old := t.lock
	t.lock = int(fd)
	t.mu.Unlock()
	if old >= 0 {
		_ = syscall.Close(old)
	}
	return nil
}

// ErrDelayTooSmall is wrapped by Watch's error when logind keeps an
// InhibitDelayMaxSec below Config.GracePeriod after the reload.
var ErrDelayTooSmall = errors.New("logind InhibitDelayMaxSec is below the shutdown grace period")

// ensureDelay raises InhibitDelayMaxSec to the grace period when smaller.
func (t *Trigger) ensureDelay(ctx context.Context, conn *dbus.Conn) error {
	delay, err := t.readDelay(ctx, conn)
	if err != nil {
		return err
	}
	want := t.cfg.GracePeriod
	if want <= delay {
		return nil
	}
	if err := writeDropIn(t.cfg.ConfigDir, want); err != nil {
		return err
	}
	// SIGHUP makes logind re-read its configuration.
	if err := conn.Object(systemdService, systemdPath).CallWithContext(ctx,
		"org.freedesktop.systemd1.Manager.KillUnit", 0, logindUnit, "all", int32(syscall.SIGHUP)).Err; err != nil {
		return fmt.Errorf("logind: reload %s: %w", logindUnit, err)
	}
	// The reload is asynchronous: read again, backing off.
	wait := 100 * time.Millisecond
	const tries = 5
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.cfg.Clock.After(wait):
		}
		if delay, err = t.readDelay(ctx, conn); err != nil {
			return err
		}
		if want <= delay {
			return nil
		}
		if i == tries {
			return fmt.Errorf("logind: %w: still %v after %d reads, want %v (ShutdownGracePeriod)", ErrDelayTooSmall, delay, tries, want)
		}
		wait *= 2
	}
}

func (t *Trigger) readDelay(ctx context.Context, conn *dbus.Conn) (time.Duration, error) {
	var usec uint64
	if err := conn.Object(login1Service, login1Path).CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0,
		login1Manager, "InhibitDelayMaxUSec").Store(&usec); err != nil {
		return 0, fmt.Errorf("logind: read InhibitDelayMaxUSec: %w", err)
	}
	d := time.Duration(usec) * time.Microsecond
	t.mu.Lock()
	t.delay = d
	t.mu.Unlock()
	return d, nil
}

// writeDropIn writes dir/99-kubelet.conf with InhibitDelayMaxSec, in
// whole seconds rounded up (so the value is never below the grace period).
func writeDropIn(dir string, d time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("logind: Config.ConfigDir: %w", err)
	}
	secs := int64((d + time.Second - 1) / time.Second)
	text := fmt.Sprintf("# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=%d\n", secs)
	p := filepath.Join(dir, DropInName)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		return fmt.Errorf("logind: write %s: %w", p, err)
	}
	return nil
}
