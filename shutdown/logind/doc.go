// Package logind is a systemd-logind shutdown.Trigger and
// shutdown.Releaser over D-Bus (godbus), as upstream kubelet's node
// shutdown manager uses logind:
//
//   - Watch connects to the system bus (Config.BusAddress; "" is the
//     host's, DBUS_SYSTEM_BUS_ADDRESS or /run/dbus/system_bus_socket) and
//     reads logind's InhibitDelayMaxUSec. When Config.GracePeriod (the
//     total grace period, shutdown.TotalGracePeriod) is larger, it writes
//     the drop-in Config.ConfigDir/99-kubelet.conf ("[Login]
//     InhibitDelayMaxSec=N"), has systemd send SIGHUP to
//     systemd-logind.service (Manager.KillUnit) and reads the value again
//     with a short exponential back-off (100ms, 5 tries); if logind still
//     reports less, Watch fails, as upstream's manager fails to start.
//   - It then takes a "delay" inhibitor lock for "shutdown"
//     (Manager.Inhibit; the fd is held by the Trigger) and watches the
//     PrepareForShutdown signal: true is a shutdown (sent on the channel);
//     false is a cancelled one, for which a new lock is taken first.
//   - Release closes the lock, so logind may go on shutting down.
//   - A dropped connection is re-made every second (as upstream), with the
//     same steps, until ctx ends; the channel stays open meanwhile.
//
// DefaultWho and DefaultWhy are upstream's, so `systemd-inhibit --list`
// shows the agent as operators know it.
//
// Usage:
//
//	t := logind.New(logind.Config{GracePeriod: shutdown.TotalGracePeriod(groups)})
//	go m.Run(ctx, t) // m a *shutdown.Manager
package logind
