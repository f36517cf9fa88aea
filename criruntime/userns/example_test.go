package userns_test

import (
	"fmt"
	"os"

	"github.com/nodekit/nodekit/criruntime/userns"
)

// A pod's range survives an agent restart: a new Allocator over the same
// pods directory hands the pod the same IDs and the next pod other ones.
func Example() {
	dir, err := os.MkdirTemp("", "userns-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	a, _ := userns.New(userns.Config{PodsDir: dir, MaxPods: 110})
	m, _ := a.Get("pod-a")
	fmt.Printf("pod-a: container 0..%d = host %d..%d\n", m.Length-1, m.HostID, m.HostID+m.Length-1)

	restarted, _ := userns.New(userns.Config{PodsDir: dir, MaxPods: 110})
	again, _ := restarted.Get("pod-a")
	other, _ := restarted.Get("pod-b")
	fmt.Println("pod-a after restart:", again.HostID, "pod-b:", other.HostID)
	// Output:
	// pod-a: container 0..65535 = host 65536..131071
	// pod-a after restart: 65536 pod-b: 131072
}
