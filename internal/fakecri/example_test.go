package fakecri_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/nodekit/nodekit/internal/fakecri"
)

// Start a fake runtime and point an agent at its endpoint
// (containerRuntimeEndpoint in a KubeletConfiguration), then stop it.
func ExampleStart() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fakecri-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	s, err := fakecri.Start(ctx, fakecri.Config{Dir: dir, Images: []string{"registry.k8s.io/e2e-test-images/busybox:1.37.0-2"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = s.Stop(ctx) }()
	fmt.Println(strings.HasPrefix(s.Endpoint, "unix://"+dir))
	// Output: true
}
