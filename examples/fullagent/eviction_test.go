package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/stats"
)

// runtimeOf opens the test's containerd, to look behind the agent's back.
func runtimeOf(t *testing.T, e *env) *criruntime.Runtime {
	t.Helper()
	rt, err := criruntime.New(t.Context(), criruntime.Config{Endpoint: e.cri.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// containersOf lists the runtime's containers (dead ones included) of one
// pod, by container name.
func containersOf(t *testing.T, rt *criruntime.Runtime, uid types.UID) map[string][]nodekit.State {
	t.Helper()
	pods, err := rt.ListPods(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]nodekit.State{}
	for _, p := range pods {
		if p.ID != uid {
			continue
		}
		for _, c := range p.Containers {
			out[c.Name] = append(out[c.Name], c.State)
		}
	}
	return out
}

// TestLocalStorageEvictionAndContainerGC: a pod that fills its emptyDir
// past sizeLimit is evicted (Failed, Evicted, upstream's message) while a
// Guaranteed pod within its limits runs on; the evicted pod's containers
// are then garbage collected, and a crash-looping container keeps only
// its newest dead instance, whose log `--previous` still reads. Volumes
// are measured every volumeStatsAggPeriod (2s here; upstream's default
// minute would make the eviction wait for it).
func TestLocalStorageEvictionAndContainerGC(t *testing.T) {
	e := startEnv(t, envOption{config: "volumeStatsAggPeriod: 2s\n", flags: func(o *options) { o.containerGCPeriod = 2 * time.Second }})
	rt := runtimeOf(t, e)
	grace := int64(1)
	filler := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "filler"},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &grace,
			Volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(1<<20, resource.BinarySI)}}}},
			Containers: []v1.Container{{Name: "app", ImagePullPolicy: v1.PullNever,
				Command:      []string{"sh", "-c", "dd if=/dev/zero of=/scratch/fill bs=1M count=4 && sleep 3600"},
				VolumeMounts: []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}}},
	}
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}
	guaranteed := simplePod("guaranteed", v1.RestartPolicyAlways, "sleep 3600")
	guaranteed.Spec.TerminationGracePeriodSeconds = &grace
	guaranteed.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: res, Limits: res}
	crasher := simplePod("crasher", v1.RestartPolicyAlways, "echo crashed; exit 1")
	for _, p := range []*v1.Pod{filler, guaranteed, crasher} {
		e.createPod(t, p)
	}

	evicted := e.waitPod(t, "filler", 90*time.Second, "evicted", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if evicted.Status.Reason != "Evicted" || evicted.Status.Message != `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". ` {
		t.Fatalf("filler: %s", describeStatus(evicted))
	}
	if cs := containerStatus(evicted, "app"); cs == nil || cs.State.Terminated == nil {
		t.Fatalf("the evicted pod's container is not terminated: %s", describeStatus(evicted))
	}
	g := e.waitPod(t, "guaranteed", 30*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if g.Status.QOSClass != v1.PodQOSGuaranteed {
		t.Fatalf("guaranteed pod has QoS %s", g.Status.QOSClass)
	}

	// Evicted: its content may go although its object stays, so container
	// GC removes its containers.
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return len(containersOf(t, rt, evicted.UID)) == 0, nil
	})
	if err != nil {
		t.Fatalf("the evicted pod's containers were not garbage collected: %v", containersOf(t, rt, evicted.UID))
	}

	// Crash loop: 3 exits (back-off 10 s, then 20 s) leave at most one dead
	// instance beside the current one.
	cr := e.waitPod(t, "crasher", 120*time.Second, "2 restarts", func(p *v1.Pod) bool {
		cs := containerStatus(p, "app")
		return cs != nil && cs.RestartCount >= 2
	})
	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		dead := 0
		for _, st := range containersOf(t, rt, cr.UID)["app"] {
			if st == nodekit.StateExited {
				dead++
			}
		}
		return dead == 1, nil
	})
	if err != nil {
		t.Fatalf("crasher's dead containers were not collected down to 1: %v", containersOf(t, rt, cr.UID))
	}
	b, err := e.client.CoreV1().Pods("default").GetLogs("crasher", &v1.PodLogOptions{Container: "app", Previous: true}).DoRaw(t.Context())
	if err != nil || !strings.Contains(string(b), "crashed") {
		t.Fatalf("logs --previous after GC = %q, %v", b, err)
	}
	if g := e.waitPod(t, "guaranteed", time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning }); g.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("the guaranteed pod restarted: %s", describeStatus(g))
	}
}

// TestDiskPressure: with evictionHard nodefs.available above the free
// space, the node reports DiskPressure, image GC removes the unused image,
// a new pod is rejected with reason Evicted, and a static (critical) pod
// is admitted and never evicted.
func TestDiskPressure(t *testing.T) {
	fs, err := stats.Statfs(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	threshold := fs.Available + 20<<30 // more than can ever be free here
	e := startEnv(t, envOption{
		config: fmt.Sprintf("evictionHard:\n  nodefs.available: %q\n  imagefs.available: %q\nimageMinimumGCAge: 1s\n", fmt.Sprint(threshold), fmt.Sprint(threshold)),
		before: func(e *env) {
			writeFile(t, filepath.Join(e.manifests, "critical.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: critical
  namespace: default
spec:
  containers:
  - name: app
    image: %s
    imagePullPolicy: Never
    command: ["sleep", "3600"]
`, agenttest.BusyboxImage))
		},
	})
	rt := runtimeOf(t, e)

	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeDiskPressure {
				return c.Status == v1.ConditionTrue && c.Reason == "KubeletHasDiskPressure", nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("the node never reported DiskPressure")
	}

	e.createPod(t, simplePod("rejected", v1.RestartPolicyAlways, "sleep 3600"))
	p := e.waitPod(t, "rejected", 30*time.Second, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if p.Status.Reason != "Evicted" || p.Status.Message != "Pod was rejected: The node had condition: [DiskPressure]. " {
		t.Fatalf("rejected pod: %s", describeStatus(p))
	}

	mirror := "critical-" + testNode
	e.waitPod(t, mirror, 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	// Reclaim before eviction: the unused agnhost image goes; the busybox
	// image (in use) and the sandbox image (pinned) stay.
	if !e.cri.HasImage(agenttest.AgnhostImage) {
		agenttest.RequireIntegration(t, "the agnhost image", errors.New("not imported (run hack/build-tools.sh): image removal cannot be checked"))
	}
	err = wait.PollUntilContextTimeout(t.Context(), time.Second, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return !hasImage(t, rt, agenttest.AgnhostImage), nil
	})
	if err != nil {
		t.Fatal("image GC did not remove the unused agnhost image under disk pressure")
	}
	for _, img := range []string{agenttest.BusyboxImage, agenttest.PauseImage} {
		if !hasImage(t, rt, img) {
			t.Fatalf("image GC removed %s", img)
		}
	}
	// Two more eviction passes (10 s apart): the critical pod stays.
	time.Sleep(25 * time.Second)
	m := e.waitPod(t, mirror, time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if cs := containerStatus(m, "app"); cs == nil || cs.RestartCount != 0 || cs.State.Running == nil {
		t.Fatalf("the critical pod was disturbed: %s", describeStatus(m))
	}
}

func hasImage(t *testing.T, rt *criruntime.Runtime, ref string) bool {
	t.Helper()
	imgs, err := rt.ListImages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs {
		for _, tag := range im.RepoTags {
			if tag == ref {
				return true
			}
		}
	}
	return false
}
