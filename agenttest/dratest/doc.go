// Package dratest is a small DRA (Dynamic Resource Allocation) driver of
// the test kit, run as its own process (cmd/dratest-driver) beside the
// agent, as a vendor's node driver runs beside a kubelet. It is built on
// k8s.io/dynamic-resource-allocation/kubeletplugin, the helper real
// drivers use.
//
// The driver registers through the agent's plugin-registration directory
// (ROOT/plugins_registry/NAME-reg.sock), publishes one ResourceSlice of
// this node with Config.Devices devices (dev-0, dev-1, ...) in a pool named
// after the node, and for every prepared claim writes one CDI spec file to
// Config.CDIDir (the directory the container runtime reads: containerd's
// cdi_spec_dirs) whose device sets DRA_DEVICE_<REQUEST>=<device> in the
// container, one variable per allocated device of the claim. Unprepare
// removes the file. Every claim a call handles is appended to
// STATE/calls.log as one JSON line (Call); a test reads them with
// Process.Calls.
//
// Driver is the in-process part (the DRAPlugin of the helper); Build and
// Start (start.go) build the command with `go build` and run it from
// tests. The driver serves the device health service (DRAResourceHealth
// v1 and v1alpha1, through the helper): every device Healthy unless
// STATE/health.json (HealthFile, written by Process.SetHealth or
// WriteHealth) says otherwise, reported on every change of the file and
// every 10 s.
package dratest
