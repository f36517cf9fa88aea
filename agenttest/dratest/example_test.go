package dratest_test

import (
	"context"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/agenttest/dratest"
)

// The driver prepares claims in-process too; Start runs it as its own
// process, registered with an agent.
func ExampleDriver() {
	dir, err := os.MkdirTemp("", "dratest-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	d, err := dratest.NewDriver(dratest.Config{Name: "dra.nodekit.test", NodeName: "n1", Devices: 2, CDIDir: dir + "/cdi", StateDir: dir + "/state"})
	if err != nil {
		panic(err)
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: "1234"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "dev", Driver: "dra.nodekit.test", Pool: "n1", Device: "dev-0"}},
		}}},
	}
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if err != nil {
		panic(err)
	}
	fmt.Println(res["1234"].Devices[0].CDIDeviceIDs)
	// Output: [dra.nodekit.test/device=claim-1234]
}
