package dra_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/nodekit/nodekit/dra"
)

// A Manager over a root directory: the plugin watcher validates drivers
// by the gRPC services they speak.
func Example() {
	root, _ := os.MkdirTemp("", "dra-example")
	defer os.RemoveAll(root)
	m, err := dra.New(dra.Config{
		RootDir: root,
		Claims: dra.ClaimGetterFunc(func(context.Context, string, string) (*resourceapi.ResourceClaim, error) {
			return nil, errors.New("no API server in this example")
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	fmt.Println(m.ValidatePlugin(ctx, "gpu.example.com", "/plugins/gpu.sock", []string{"v1.DRAPlugin"}))
	fmt.Println(m.ValidatePlugin(ctx, "gpu.example.com", "/plugins/gpu.sock", []string{"v1alpha4.Node"}) != nil)
	// Output:
	// <nil>
	// true
}
