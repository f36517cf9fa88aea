package deviceplugintest_test

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/devicemgr"
	"github.com/nodekit/nodekit/devicemgr/deviceplugintest"
)

// The fake plugin registers with a device manager, which then advertises
// its devices; one turning unhealthy leaves one allocatable.
func Example() {
	ctx := klog.NewContext(context.Background(), logr.Discard())
	dir, _ := os.MkdirTemp("", "dpt")
	defer os.RemoveAll(dir)
	m, _ := devicemgr.New(ctx, devicemgr.Config{Dir: dir})
	if err := m.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer m.Stop()

	p, _ := deviceplugintest.New(deviceplugintest.Config{Resource: "example.com/foo", Dir: dir, Devices: 2})
	if err := p.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer p.Stop()
	if err := p.Register(ctx); err != nil {
		fmt.Println(err)
		return
	}
	wait := func(want int64) {
		for range m.Changes() {
			capacity, allocatable, _ := m.Resources()
			c, a := capacity["example.com/foo"], allocatable["example.com/foo"]
			if a.Value() == want {
				fmt.Println("capacity", c.Value(), "allocatable", a.Value())
				return
			}
		}
	}
	wait(2)
	p.SetHealthy("dev-1", false)
	wait(1)
	// Output:
	// capacity 2 allocatable 2
	// capacity 2 allocatable 1
}
