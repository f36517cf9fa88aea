package agenttest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/syncloop"
)

func simPod(name string, policy v1.RestartPolicy) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), CreationTimestamp: metav1.Now()},
		Spec: v1.PodSpec{RestartPolicy: policy, Containers: []v1.Container{
			{Name: "app", Image: "busybox"},
		}},
	}
}

// mustContainer returns the container's status or fails the test.
func mustContainer(t *testing.T, n *agenttest.SimNode, uid types.UID, name string) v1.ContainerStatus {
	t.Helper()
	cs, ok := n.ContainerStatus(uid, name)
	if !ok {
		st, _ := n.Status(uid)
		t.Fatalf("pod %s has no status for container %s: %+v", uid, name, st)
	}
	return cs
}

func phase(n *agenttest.SimNode, uid types.UID) v1.PodPhase {
	st, _ := n.Status(uid)
	return st.Phase
}

func TestSimNodeContainerDiesAndCrashLoops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		p := simPod("web", v1.RestartPolicyAlways)
		n.AddPod(p)
		n.Settle(2 * time.Second)
		if cs := mustContainer(t, n, p.UID, "app"); cs.State.Running == nil || phase(n, p.UID) != v1.PodRunning {
			t.Fatalf("not running: %s %+v", phase(n, p.UID), cs.State)
		}

		// The first exit restarts at once; the second waits 10 s.
		if err := n.Runtime().ExitContainer(p.UID, "app", 1); err != nil {
			t.Fatal(err)
		}
		n.Settle(2 * time.Second)
		if cs := mustContainer(t, n, p.UID, "app"); cs.RestartCount != 1 || cs.State.Running == nil {
			t.Fatalf("after the first exit: %+v", cs)
		}
		_ = n.Runtime().ExitContainer(p.UID, "app", 1)
		n.Settle(2 * time.Second)
		cs := mustContainer(t, n, p.UID, "app")
		if w := cs.State.Waiting; w == nil || w.Reason != "CrashLoopBackOff" || !strings.Contains(w.Message, "back-off 10s") {
			t.Fatalf("want CrashLoopBackOff 10s, have %+v", cs.State)
		}
		if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 || lt.Reason != "Error" {
			t.Fatalf("last state: %+v", cs.LastTerminationState)
		}
		n.Settle(10 * time.Second)
		if cs := mustContainer(t, n, p.UID, "app"); cs.RestartCount != 2 || cs.State.Running == nil {
			t.Fatalf("not restarted after the back-off: %+v", cs)
		}
		// What the sink saw ends with what the node holds.
		pub := n.Published(p.UID)
		if len(pub) == 0 || pub[len(pub)-1].ContainerStatuses[0].RestartCount != 2 {
			t.Fatalf("published statuses lag behind: %d published", len(pub))
		}
	})
}

func TestSimNodeImagePullFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		n.Runtime().FailImage("busybox", nodekit.ErrImagePull)
		p := simPod("web", v1.RestartPolicyAlways)
		n.AddPod(p)
		n.Settle(500 * time.Millisecond)
		if w := mustContainer(t, n, p.UID, "app").State.Waiting; w == nil || w.Reason != "ErrImagePull" {
			t.Fatalf("want ErrImagePull, have %+v", w)
		}
		n.Settle(5 * time.Second)
		if w := mustContainer(t, n, p.UID, "app").State.Waiting; w == nil || w.Reason != "ImagePullBackOff" {
			t.Fatalf("want ImagePullBackOff, have %+v", w)
		}
		if phase(n, p.UID) != v1.PodPending {
			t.Fatalf("phase %s, want Pending", phase(n, p.UID))
		}
		// The image becomes available: a later attempt starts the container.
		n.Runtime().FailImage("busybox", "")
		n.Settle(11 * time.Minute)
		if cs := mustContainer(t, n, p.UID, "app"); cs.State.Running == nil || cs.RestartCount != 0 {
			t.Fatalf("not running after the image came back: %+v", cs)
		}
	})
}

// As upstream, the pull is tried again once its back-off (10 s, doubling
// up to 5 min) has passed.
func TestSimNodeImagePullBackOffEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		n.Runtime().FailImage("busybox", nodekit.ErrImagePull)
		p := simPod("web", v1.RestartPolicyAlways)
		n.AddPod(p)
		n.Settle(5 * time.Second)
		n.Runtime().FailImage("busybox", "")
		n.Settle(10 * time.Second) // the first back-off is 10 s
		if cs := mustContainer(t, n, p.UID, "app"); cs.State.Running == nil {
			t.Fatalf("not running 15 s after a failed pull: %+v", cs.State)
		}
	})
}

// An image volume whose pull fails holds the container that mounts it in
// ErrImagePull, then ImagePullBackOff naming the volume's image, as
// upstream; once the image can be pulled the container starts.
func TestSimNodeImageVolumePullBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		n.Runtime().FailImage("tools:1", nodekit.ErrImagePull)
		p := simPod("web", v1.RestartPolicyAlways)
		p.Spec.Volumes = []v1.Volume{{Name: "tools", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "tools:1"}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "tools", MountPath: "/tools"}}
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "plain", Image: "busybox"})
		n.AddPod(p)
		n.Settle(500 * time.Millisecond)
		if w := mustContainer(t, n, p.UID, "app").State.Waiting; w == nil || w.Reason != "ErrImagePull" {
			t.Fatalf("want ErrImagePull, have %+v", w)
		}
		n.Settle(5 * time.Second)
		if cs := mustContainer(t, n, p.UID, "plain"); cs.State.Running == nil {
			t.Fatalf("plain mounts no image volume but is %+v", cs.State)
		}
		w := mustContainer(t, n, p.UID, "app").State.Waiting
		if w == nil || w.Reason != "ImagePullBackOff" || w.Message != `Back-off pulling image "tools:1": ErrImagePull: fake: image "tools:1": ErrImagePull` {
			t.Fatalf("want ImagePullBackOff for the volume's image, have %+v", w)
		}
		n.Runtime().FailImage("tools:1", "")
		n.Settle(10 * time.Second) // the first back-off is 10 s
		if cs := mustContainer(t, n, p.UID, "app"); cs.State.Running == nil {
			t.Fatalf("not running after the volume's image came back: %+v", cs.State)
		}
	})
}

func TestSimNodeRuntimeUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		web := simPod("web", v1.RestartPolicyAlways)
		n.AddPod(web)
		n.Settle(2 * time.Second)

		n.Runtime().SetUnavailable(errors.New("socket gone"))
		n.Settle(2 * time.Second)
		if err := n.Healthy(); err == nil || !errors.Is(err, nodekit.ErrRuntimeUnavailable) {
			t.Fatalf("Healthy() = %v, want RuntimeUnavailable", err)
		}
		// The node does nothing while the runtime is away: the running pod
		// keeps its status, a new pod waits.
		db := simPod("db", v1.RestartPolicyAlways)
		n.AddPod(db)
		n.Settle(10 * time.Second)
		if phase(n, web.UID) != v1.PodRunning {
			t.Fatalf("web: phase %s during the outage", phase(n, web.UID))
		}
		if _, ok := n.Status(db.UID); ok {
			t.Fatal("db was handled while the runtime was unavailable")
		}

		n.Runtime().SetUnavailable(nil)
		n.Settle(10 * time.Second)
		if err := n.Healthy(); err != nil {
			t.Fatalf("still unhealthy: %v", err)
		}
		if phase(n, db.UID) != v1.PodRunning || mustContainer(t, n, web.UID, "app").RestartCount != 0 {
			t.Fatalf("after the outage: db %s, web %+v", phase(n, db.UID), mustContainer(t, n, web.UID, "app"))
		}
	})
}

func TestSimNodeProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		p := simPod("web", v1.RestartPolicyAlways)
		probe := &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
		p.Spec.Containers[0].ReadinessProbe = probe
		p.Spec.Containers[0].LivenessProbe = probe
		n.AddPod(p)
		n.Settle(2 * time.Second)
		if cs := mustContainer(t, n, p.UID, "app"); cs.State.Running == nil || cs.Ready {
			t.Fatalf("want running and unready before any readiness result: %+v", cs)
		}
		if err := n.SetProbe(p.UID, "app", syncloop.Readiness, syncloop.ProbeSuccess); err != nil {
			t.Fatal(err)
		}
		n.Settle(time.Second)
		if cs := mustContainer(t, n, p.UID, "app"); !cs.Ready {
			t.Fatalf("not ready after readiness Success: %+v", cs)
		}

		// A failed liveness probe kills the container; it is restarted
		// and, as a new instance, has no readiness result yet.
		if err := n.SetProbe(p.UID, "app", syncloop.Liveness, syncloop.ProbeFailure); err != nil {
			t.Fatal(err)
		}
		n.Settle(2 * time.Second)
		cs := mustContainer(t, n, p.UID, "app")
		if cs.RestartCount != 1 || cs.State.Running == nil || cs.Ready {
			t.Fatalf("after liveness failure: %+v", cs)
		}
		if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 137 {
			t.Fatalf("last state: %+v", cs.LastTerminationState)
		}
		if err := n.SetProbe(p.UID, "nope", syncloop.Liveness, syncloop.ProbeFailure); err == nil {
			t.Fatal("SetProbe on an unknown container succeeded")
		}
	})
}

func TestSimNodeGracefulDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		p := simPod("web", v1.RestartPolicyAlways)
		n.AddPod(p)
		n.Settle(2 * time.Second)
		n.DeletePod(p)
		n.Settle(5 * time.Second)

		if !n.Deleted(p.UID) {
			t.Fatal("the sink was not asked to delete the finished pod")
		}
		pub := n.Published(p.UID)
		if last := pub[len(pub)-1]; last.Phase != v1.PodFailed && last.Phase != v1.PodSucceeded {
			t.Fatalf("last published phase %s, want terminal", last.Phase)
		}
		if running, _ := n.Runtime().ListPods(context.Background(), false); len(running) != 0 {
			t.Fatalf("still running in the runtime: %+v", running[0])
		}
		// Housekeeping then forgets the removed pod.
		n.Settle(5 * time.Second)
		if _, ok := n.Status(p.UID); ok {
			t.Fatal("status of a removed pod kept after housekeeping")
		}
	})
}

func TestSimNodeAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		onePod := nodekit.AdmitFunc(func(_ context.Context, r nodekit.AdmitRequest) nodekit.Decision {
			if len(r.Pods) >= 1 {
				return nodekit.Decision{Reason: "NodeFull", Message: "this node runs one pod"}
			}
			return nodekit.Admitted
		})
		n := agenttest.StartSimNode(t, agenttest.SimOptions{Admitters: []nodekit.Admitter{onePod}})
		a, b := simPod("a", v1.RestartPolicyAlways), simPod("b", v1.RestartPolicyAlways)
		n.AddPod(a)
		n.Settle(time.Second)
		n.AddPod(b)
		n.Settle(time.Second)
		if phase(n, a.UID) != v1.PodRunning {
			t.Fatalf("a: %s", phase(n, a.UID))
		}
		st, _ := n.Status(b.UID)
		if st.Phase != v1.PodFailed || st.Reason != "NodeFull" || !strings.Contains(st.Message, "this node runs one pod") {
			t.Fatalf("b: %+v", st)
		}
		for _, c := range n.Runtime().Calls() {
			if strings.Contains(c, "default/b") {
				t.Fatalf("the runtime saw a rejected pod: %s", c)
			}
		}
	})
}
