package devicemgr_test

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/devicemgr"
	"github.com/nodekit/nodekit/devicemgr/deviceplugintest"
)

// A plugin serving two devices of example.com/foo registers; the node
// advertises them, a pod asking for one is admitted, and its container
// gets what the plugin's Allocate returned.
func Example() {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	defer cancel()
	dir, _ := os.MkdirTemp("", "dm")
	defer os.RemoveAll(dir)

	var active []*v1.Pod
	m, err := devicemgr.New(ctx, devicemgr.Config{Dir: dir, ActivePods: func() []*v1.Pod { return active }})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := m.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer m.Stop()

	plugin, _ := deviceplugintest.New(deviceplugintest.Config{Resource: "example.com/foo", Dir: dir, Devices: 2})
	_ = plugin.Start(ctx)
	defer plugin.Stop()
	_ = plugin.Register(ctx)

	// The agent updates the node status whenever the manager signals.
	for range m.Changes() {
		capacity, allocatable, _ := m.Resources()
		if q := allocatable["example.com/foo"]; q.Value() == 2 {
			c := capacity["example.com/foo"]
			fmt.Println("capacity:", c.String(), "allocatable:", q.String())
			break
		}
	}

	pod := fooPod("gpu-job")
	d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod, Pods: active})
	active = append(active, pod)
	fmt.Println("admitted:", d.Admit)

	opts, _ := m.ContainerOptions(ctx, pod, &pod.Spec.Containers[0])
	fmt.Println("env:", opts.Envs)
	fmt.Println("devices:", opts.Devices)
	// Output:
	// capacity: 2 allocatable: 2
	// admitted: true
	// env: [{FAKE_DEVICES dev-0}]
	// devices: [{/dev/null /dev/fake/dev-0 rw}]
}
