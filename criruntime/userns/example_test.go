package userns_test

import (
	"fmt"
	"os"

	"github.com/nodekit/nodekit/criruntime/userns"
)

// A pod's range survives an agent restart: a new Allocator over the same
// pods directory hands the pod the same IDs and the next pod other ones.
// Where a range starts is random, as upstream's.
func Example() {
	dir, err := os.MkdirTemp("", "userns-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	a, _ := userns.New(userns.Config{PodsDir: dir, MaxPods: 110})
	m, _ := a.Get("pod-a")
	fmt.Printf("pod-a: container 0..%d = host %d IDs from a multiple of %d: %v\n", m.Length-1, m.Length, m.Length, m.HostID%m.Length == 0 && m.HostID > 0)

	restarted, _ := userns.New(userns.Config{PodsDir: dir, MaxPods: 110})
	again, _ := restarted.Get("pod-a")
	other, _ := restarted.Get("pod-b")
	fmt.Println("pod-a keeps its range:", again == m, "pod-b gets another:", other.HostID != m.HostID)
	// Output:
	// pod-a: container 0..65535 = host 65536 IDs from a multiple of 65536: true
	// pod-a keeps its range: true pod-b gets another: true
}
