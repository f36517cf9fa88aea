package kubeletconf_test

import (
	"fmt"

	"github.com/nodekit/nodekit/internal/kubeletconf"
)

func ExampleKubeletOnly() {
	fmt.Print(kubeletconf.KubeletOnly("10.88.3.1"))
	// Output:
	// failCgroupV1: false
	// failSwapOn: false
	// healthzBindAddress: 10.88.3.1
}
