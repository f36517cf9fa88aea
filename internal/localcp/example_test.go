package localcp_test

import (
	"context"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/internal/localcp"
)

// Start a private control plane, talk to it as a node agent, stop it. (Not
// run by go test: it needs the binaries; see TestControlPlaneStartStop.)
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "localcp-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	cp, err := localcp.Start(ctx, localcp.Config{Dir: dir, NodeNames: []string{"node-1"}})
	if err != nil {
		fmt.Println(err) // names the binary, the flag or the log tail at fault
		return
	}
	defer func() { _ = cp.Stop(ctx) }()

	cfg, err := cp.NodeConfig("node-1") // CN=system:node:node-1, O=system:nodes
	if err != nil {
		fmt.Println(err)
		return
	}
	nodes := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes()
	_, err = nodes.Get(ctx, "node-1", metav1.GetOptions{})
	fmt.Println(err) // nodes "node-1" not found: not registered yet
}
