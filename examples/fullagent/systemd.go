package main

// systemdBusEnv names the system bus's address where it is not the
// default; upstream kubelet's D-Bus library (godbus) reads it, and so the
// systemd cgroup driver here does too.
const systemdBusEnv = "DBUS_SYSTEM_BUS_ADDRESS"

// systemdBus is the D-Bus address the systemd cgroup driver finds systemd
// at: $DBUS_SYSTEM_BUS_ADDRESS when set, else "" (cgroupmgr's default,
// the system bus at /run/dbus/system_bus_socket).
func systemdBus(getenv func(string) string) string {
	return getenv(systemdBusEnv)
}
