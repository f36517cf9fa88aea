// Package localsystemd runs a real, private systemd (Debian's
// /lib/systemd/system) for tests: PID 1 of its own PID, mount, UTS, IPC,
// network and cgroup namespaces, as systemd runs in a container, with its
// own system D-Bus (a dbus-daemon it starts itself from a socket unit).
//
// Before the namespaces are made, the starter joins a cgroup of its own,
// created at the top of every cgroup hierarchy (internal/cgroot), and only
// then unshares the cgroup namespace: systemd sees that cgroup as "/" and
// owns that subtree only. Inside the mount namespace the cgroup file
// systems are mounted again (so their roots are the namespace's), /run is
// a directory of Config.Dir (so the bus sockets can be reached from
// outside), the unit directories are replaced by a minimal set (a target,
// dbus.socket, dbus.service, system.slice: no getty, journald, udev,
// tmpfiles, sysctl or fstab units run, and no generator), and
// /dev/console is a log file in Config.Dir. The environment is emptied but
// for container=nodekit, so systemd knows it runs in a container.
//
// With Config.Logind, systemd-logind runs too (a unit of its own without
// the distribution's sandboxing); it reads its drop-ins from the
// namespace's /run/systemd/logind.conf.d (LogindConfDir, below
// Config.Dir), so tests never write to the host's /etc. A shutdown asked
// of that logind (PowerOff on BusAddress) reaches only this systemd: its
// poweroff.target is an empty target (logind wants one to exist; this one
// pulls in no systemd-poweroff.service and has no SuccessAction), and
// systemd is PID 1 of its own PID namespace. logind refuses an inhibitor lock to a caller whose PID
// its namespace cannot see, so such clients run through Command (in the
// PID namespace, with the host's mounts). Enter is the prefix for a
// program that must see this systemd as its host's (a container runtime
// with the systemd cgroup driver, a node agent): its PID, mount and
// cgroup namespaces, the host's network.
//
// Start returns once systemd reports "running" or "degraded" over the
// bus; Stop asks it to exit (Manager.Exit), kills the namespace's PID 1
// if it does not, and removes the cgroup subtree. The mounts die with the
// mount namespace; nothing is left behind.
//
// It does not own what runs under that systemd (tests start units over
// the bus) and cannot run without root, unshare(1), systemd and
// dbus-daemon (Available says which is missing).
package localsystemd
