package syncloop_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/syncloop"
	"github.com/nodekit/nodekit/volumemgr"
	"github.com/nodekit/nodekit/volumemgr/volumemgrtest"
)

type recordedEvents struct {
	mu   sync.Mutex
	list []string
}

func (r *recordedEvents) Eventf(_ runtime.Object, typ, reason, format string, args ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, typ+" "+reason+" "+fmt.Sprintf(format, args...))
}

func (r *recordedEvents) matching(prefix string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.list {
		if strings.HasPrefix(e, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// TestUnsupportedVolumeWaitsInContainerCreating: a pod whose volume has no
// plugin (a persistentVolumeClaim) stays Pending with its container
// waiting in ContainerCreating; each sync reports upstream's FailedMount
// and the worker retries with back-off (1, 2, 4, 8 s ...), never in a loop;
// the runtime is never asked to create the pod.
func TestUnsupportedVolumeWaitsInContainerCreating(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &recordedEvents{}
		vm, err := volumemgr.New(volumemgr.Config{RootDir: t.TempDir(), Mounter: &volumemgrtest.Mounter{}, Objects: &volumemgrtest.Objects{}, Events: ev})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() { _ = vm.Run(ctx) }()
		n := agenttest.StartSimNode(t, agenttest.SimOptions{Loop: func(c *syncloop.Config) { c.Volumes, c.Recorder = vm, ev }})
		rt := n.Runtime()
		p := pod("u1", v1.RestartPolicyAlways, "app")
		p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "claim"}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		n.AddPod(p)
		n.Settle(100 * time.Millisecond)
		want := `Warning FailedMount Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: ` +
			`failed to get Plugin from volumeSpec for volume "data" err=no volume plugin matched: persistentVolumeClaim volumes are not supported by this node agent`
		if got := ev.matching("Warning FailedMount"); len(got) != 1 || got[0] != want {
			t.Fatalf("events at once = %q\nwant [%s]", got, want)
		}
		// Attempts at 0, 1, 3, 7 s, then 15 s: four in the first 10 s.
		n.Settle(10 * time.Second)
		if got := ev.matching("Warning FailedMount"); len(got) != 4 {
			t.Fatalf("%d FailedMount events in 10 s, want 4 (back-off 1, 2, 4 s): %q", len(got), got)
		}
		s := simStatus(t, n, "u1")
		cs := containerState(t, s, "app")
		if s.Phase != v1.PodPending || cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating" {
			t.Fatalf("status: phase %s, app %+v; want Pending, waiting ContainerCreating", s.Phase, cs.State)
		}
		for _, c := range rt.Calls() {
			if strings.HasPrefix(c, "SyncPod") {
				t.Fatalf("the runtime was asked to run the pod: %v", rt.Calls())
			}
		}
	})
}
