package main

import "testing"

func TestSystemdBus(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if got := systemdBus(getenv); got != "" {
		t.Errorf("systemdBus without %s = %q, want \"\" (the system bus)", systemdBusEnv, got)
	}
	env["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/run/other_bus"
	if got := systemdBus(getenv); got != "unix:path=/run/other_bus" {
		t.Errorf("systemdBus = %q, want $DBUS_SYSTEM_BUS_ADDRESS", got)
	}
}
