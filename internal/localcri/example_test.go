package localcri_test

import (
	"context"
	"fmt"
	"os"

	"github.com/nodekit/nodekit/internal/localcri"
)

// Start a private containerd, point a CRI client (or a node agent) at its
// endpoint, and stop it. Needs root, containerd, runc and the CNI plugins.
func ExampleStart() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "nk-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()

	c, err := localcri.Start(ctx, localcri.Config{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = c.Stop(ctx) }()

	fmt.Println("CRI endpoint:", c.Endpoint)
	fmt.Println("node IP:", c.Gateway, "pods in", c.Subnet)
	for _, img := range c.Images {
		fmt.Println(img.Name, img.Tags)
	}
}
