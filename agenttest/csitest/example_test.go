package csitest_test

import (
	"context"
	"fmt"
	"os"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/nodekit/nodekit/agenttest/csitest"
)

// The server answers in-process too; Start runs it as its own process.
func ExampleServer() {
	dir, err := os.MkdirTemp("", "csitest-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	s, err := csitest.NewServer(csitest.Config{Name: "csi.nodekit.test", NodeID: "n1", MaxVolumes: 3, StateDir: dir})
	if err != nil {
		panic(err)
	}
	r, err := s.NodeGetInfo(context.Background(), &csipb.NodeGetInfoRequest{})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.GetNodeId(), r.GetMaxVolumesPerNode())
	// Output: n1 3
}
