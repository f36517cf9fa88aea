package podconfig_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/podconfig"
)

// An agent restarts while the API server is unreachable: the checkpoint it
// wrote earlier brings its pods back.
func ExampleNewCheckpointSource() {
	dir, err := os.MkdirTemp("", "root")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "pod_checkpoint")
	web := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "edge", UID: "web-1"},
		Spec:       v1.PodSpec{NodeName: "edge-1", Containers: []v1.Container{{Name: "nginx", Image: "nginx:1.27"}}},
	}
	if err := podconfig.WriteCheckpoint(path, &podconfig.PodCheckpoint{NodeName: "edge-1", Pods: []*v1.Pod{web}}); err != nil {
		panic(err)
	}

	// A stand-in for podconfig.NewAPISource while the API server is down:
	// it never sends anything.
	unreachable := nodekit.SourceFunc{SourceName: nodekit.SourceAPI, Func: func(ctx context.Context, _ chan<- nodekit.PodUpdate) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	src, err := podconfig.NewCheckpointSource(unreachable, podconfig.CheckpointConfig{
		Path: path, NodeName: "edge-1", Wait: 10 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	m := podconfig.New([]nodekit.Source{src})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()

	u := <-m.Updates()
	fmt.Printf("%s from %s: %s/%s; all sources seen: %v\n", u.Op, u.Source, u.Pods[0].Namespace, u.Pods[0].Name, m.SeenAllSources())
	cancel()
	_ = <-done // Run returns once ctx is cancelled
	// Output:
	// ADD from api: edge/web; all sources seen: true
}
