package csi_test

import (
	"context"
	"fmt"

	"github.com/nodekit/nodekit/volumemgr/csi"
)

// A plugin watcher validates a driver's versions before registering it:
// only CSI 1.x is served.
func ExampleHandler_ValidatePlugin() {
	h, err := csi.NewHandler(csi.HandlerConfig{Drivers: csi.NewDrivers()})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	fmt.Println(h.ValidatePlugin(ctx, "hostpath.csi.k8s.io", "/var/lib/kubelet/plugins/hostpath/csi.sock", []string{"1.0.0"}))
	fmt.Println(h.ValidatePlugin(ctx, "old.csi.example", "/s", []string{"0.3.0"}) != nil)
	// Output:
	// <nil>
	// true
}
