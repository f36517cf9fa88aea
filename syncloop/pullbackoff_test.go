package syncloop_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
)

// startCounting is the fake runtime, counting the start attempts of each
// container (each one a pull of what it needs).
type startCounting struct {
	*agenttest.FakeRuntime
	mu     sync.Mutex
	starts map[string]int
}

func (s *startCounting) SyncPod(ctx context.Context, req nodekit.SyncPodRequest) *nodekit.SyncResult {
	s.mu.Lock()
	for _, i := range req.Actions.ContainersToStart {
		s.starts[req.Pod.Spec.Containers[i].Name]++
	}
	for _, i := range req.Actions.InitContainersToStart {
		s.starts[req.Pod.Spec.InitContainers[i].Name]++
	}
	s.mu.Unlock()
	return s.FakeRuntime.SyncPod(ctx, req)
}

func (s *startCounting) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts[name]
}

// eventCount counts the events recorded on the pod that are exactly s
// ("TYPE REASON: MESSAGE").
func eventCount(n *agenttest.SimNode, uid types.UID, s string) int {
	c := 0
	for _, ev := range n.Events(uid) {
		if ev == s {
			c++
		}
	}
	return c
}

// startPullNode is a running SimNode whose loop calls the fake runtime
// through a counter of container starts.
func startPullNode(t *testing.T) (*agenttest.SimNode, *startCounting) {
	t.Helper()
	var rt *startCounting
	n := agenttest.StartSimNode(t, agenttest.SimOptions{Runtime: func(f *agenttest.FakeRuntime) nodekit.Runtime {
		rt = &startCounting{FakeRuntime: f, starts: map[string]int{}}
		return rt
	}})
	return n, rt
}

func waiting(t *testing.T, n *agenttest.SimNode, uid types.UID, name string) v1.ContainerStateWaiting {
	t.Helper()
	w := containerState(t, simStatus(t, n, uid), name).State.Waiting
	if w == nil {
		t.Fatalf("%s is not waiting", name)
	}
	return *w
}

// TestImagePullBackOff: a failed pull gives ErrImagePull with the pull's
// message, then ImagePullBackOff with upstream's message (the back-off
// naming the image, then the last pull's reason and message) and a Normal
// BackOff event; no pull is tried again until the back-off (10 s, then
// 20 s) has passed, and a second container of the same image waits for
// the same back-off, as upstream keys it by pod and image.
func TestImagePullBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, rt := startPullNode(t)
		rt.FailImage("absent:1", nodekit.ErrImagePull)
		p := pod("u1", v1.RestartPolicyAlways)
		p.Spec.Containers = []v1.Container{{Name: "app", Image: "absent:1"}, {Name: "twin", Image: "absent:1"}, {Name: "other", Image: "busybox"}}
		n.AddPod(p)
		n.Settle(500 * time.Millisecond) // synced once; its retry comes at 1 s
		pullMsg := `fake: image "absent:1": ErrImagePull`
		if w := waiting(t, n, "u1", "app"); w.Reason != "ErrImagePull" || w.Message != pullMsg {
			t.Fatalf("first failure: %+v", w)
		}
		if rt.count("app") != 1 || rt.count("twin") != 1 {
			t.Fatalf("starts %v, want one each", rt.starts)
		}
		n.Settle(1500 * time.Millisecond)
		want := `Back-off pulling image "absent:1": ErrImagePull: ` + pullMsg
		for _, c := range []string{"app", "twin"} {
			if w := waiting(t, n, "u1", c); w.Reason != "ImagePullBackOff" || w.Message != want {
				t.Fatalf("%s in back-off: %+v, want message %q", c, w, want)
			}
		}
		if eventCount(n, "u1", `Normal BackOff: Back-off pulling image "absent:1"`) == 0 || eventCount(n, "u1", "Warning Failed: Error: ImagePullBackOff") == 0 {
			t.Errorf("no BackOff event: %q", n.Events("u1"))
		}
		// "other" exits and restarts during the back-off; the image is not
		// pulled again for it or for anyone.
		_ = rt.ExitContainer("u1", "other", 1)
		n.Settle(5 * time.Second) // 7 s after the failure (at 0.1 s)
		if rt.count("other") != 2 {
			t.Fatalf("other not restarted: %v", rt.starts)
		}
		if rt.count("app") != 1 || rt.count("twin") != 1 {
			t.Fatalf("pulled again within the 10 s back-off: %v", rt.starts)
		}
		n.Settle(5 * time.Second) // 12 s: tried again, failed again
		if rt.count("app") != 2 {
			t.Fatalf("not retried after the back-off: %v", rt.starts)
		}
		n.Settle(17 * time.Second) // 19 s into a 20 s back-off
		if rt.count("app") != 2 {
			t.Fatalf("retried within the 20 s back-off: %v", rt.starts)
		}
		rt.FailImage("absent:1", "")
		n.Settle(3 * time.Second)
		if rt.count("app") != 3 {
			t.Fatalf("not retried after the 20 s back-off: %v", rt.starts)
		}
		if cs := containerState(t, simStatus(t, n, "u1"), "app"); cs.State.Running == nil {
			t.Fatalf("app not running after a good pull: %+v", cs.State)
		}
	})
}

// TestImageVolumePullBackOff: an image volume's failed pull holds the
// containers that mount it in ImagePullBackOff naming the volume's image,
// and no container is handed to the runtime with it during the back-off,
// even while another container of the pod restarts.
func TestImageVolumePullBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, rt := startPullNode(t)
		rt.FailImage("tools:1", nodekit.ErrImagePull)
		p := pod("u1", v1.RestartPolicyAlways)
		p.Spec.Volumes = []v1.Volume{{Name: "tools", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "tools:1"}}}}
		p.Spec.Containers = []v1.Container{
			{Name: "app", Image: "busybox", VolumeMounts: []v1.VolumeMount{{Name: "tools", MountPath: "/tools"}}},
			{Name: "plain", Image: "busybox"},
		}
		n.AddPod(p)
		n.Settle(2 * time.Second)
		want := `Back-off pulling image "tools:1": ErrImagePull: fake: image "tools:1": ErrImagePull`
		if w := waiting(t, n, "u1", "app"); w.Reason != "ImagePullBackOff" || w.Message != want {
			t.Fatalf("app: %+v, want %q", w, want)
		}
		if eventCount(n, "u1", `Normal BackOff: Back-off pulling image "tools:1"`) == 0 {
			t.Errorf("no BackOff event: %q", n.Events("u1"))
		}
		_ = rt.ExitContainer("u1", "plain", 1)
		n.Settle(5 * time.Second)
		if rt.count("plain") != 2 || rt.count("app") != 1 {
			t.Fatalf("starts %v, want plain restarted and app not retried within the back-off", rt.starts)
		}
		n.Settle(5 * time.Second)
		if rt.count("app") != 2 {
			t.Fatalf("app not retried after the back-off: %v", rt.starts)
		}
	})
}
