package localregistry_test

import (
	"context"
	"fmt"
	"os"

	"github.com/nodekit/nodekit/internal/localregistry"
)

// Start a registry with one user, push an OCI layout tarball under an
// upstream name, and hand its host and CA to containerd (localcri
// Config.Mirrors). Needs the registry binary (make tools).
func ExampleStart() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "nk-registry-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()

	reg, err := localregistry.Start(ctx, localregistry.Config{Dir: dir, Users: map[string]string{"alice": "s3cret"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = reg.Stop(ctx) }()

	if err := reg.Push(ctx, "busybox.tar", "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("mirror:", reg.Host, "CA:", reg.CAFile)
}
