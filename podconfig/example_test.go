package podconfig_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/podconfig"
)

// A node agent merges a static-manifest directory with a source of its own
// (here a stand-in for an MQTT topic) and reads one ordered stream.
func Example() {
	dir, err := os.MkdirTemp("", "manifests")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	web := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: nginx\n    image: nginx:1.27\n"
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(web), 0o644); err != nil {
		panic(err)
	}

	mqtt := nodekit.SourceFunc{SourceName: "mqtt", Func: func(ctx context.Context, out chan<- nodekit.PodUpdate) error {
		sensor := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "sensor", Namespace: "edge", UID: "sensor-1"},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "read", Image: "sensor:2"}}},
		}
		select {
		case out <- nodekit.PodUpdate{Op: nodekit.SET, Pods: []*v1.Pod{sensor}}:
		case <-ctx.Done():
		}
		<-ctx.Done()
		return ctx.Err()
	}}

	m := podconfig.New([]nodekit.Source{
		podconfig.NewFileSource(dir, "edge-1", clock.RealClock{}),
		mqtt,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()

	// The two sources race; sort what arrives for a stable printout.
	var lines []string
	for len(lines) < 2 {
		u := <-m.Updates()
		for _, p := range u.Pods {
			lines = append(lines, fmt.Sprintf("%s from %s: %s/%s (config.source=%s)",
				u.Op, u.Source, p.Namespace, p.Name, p.Annotations[podconfig.ConfigSourceAnnotation]))
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Println("all sources seen:", m.SeenAllSources())

	cancel()
	fmt.Println("Run:", <-done)
	// Output:
	// ADD from file: default/web-edge-1 (config.source=file)
	// ADD from mqtt: edge/sensor (config.source=mqtt)
	// all sources seen: true
	// Run: context canceled
}
