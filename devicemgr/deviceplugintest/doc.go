// Package deviceplugintest is a fake device plugin for tests: it serves N
// fake devices of one extended resource over a real gRPC server on a unix
// socket and registers with a device manager's registration socket
// (devicemgr, or a real kubelet), as a vendor plugin does.
//
// Allocate answers, for each container, an environment variable listing
// the device IDs and one device node per device (/dev/null on the host,
// /dev/fake/<id> in the container); Config.Response replaces that. The
// plugin records every Allocate and PreStartContainer call.
//
// A manager's Start removes the sockets it finds in the directory, so
// start (or restart) the plugin after it, as real plugins do when the
// registration socket is recreated:
//
//	p, _ := deviceplugintest.New(deviceplugintest.Config{Resource: "example.com/foo", Dir: dir, Devices: 2})
//	_ = p.Start(ctx)    // after the manager's Start
//	_ = p.Register(ctx) // waits for the registration socket
//	defer p.Stop()
//	p.SetHealthy("dev-1", false) // pushed to ListAndWatch
//	p.Allocations()              // [[dev-0]] once a pod got dev-0
package deviceplugintest
