package statusmgr_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/statusmgr"
)

// TestAgainstAPIServer runs the status manager, node reporter, heartbeat,
// sink and mirror client against a real kube-apiserver, with the node's own
// credentials: the Node authorizer and NodeRestriction check every call.
func TestAgainstAPIServer(t *testing.T) {
	const nodeName = "nk-node-1"
	cp := agenttest.StartControlPlane(t, agenttest.WithNodes(nodeName))
	admin := cp.AdminClient()
	nodeClient, err := kubeclient.New(cp.NodeConfig(nodeName), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	run := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("%s.Run = %v", name, err)
			}
		}()
	}

	machine := statusmgr.Machine{NumCores: 3, MemoryBytes: 6 << 30, EphemeralStorageBytes: 40 << 30,
		HugePages: map[uint64]uint64{2 << 20: 16}, MachineID: "m-1", BootID: "b-1", KernelVersion: "6.1.0", OSImage: "Test OS"}

	t.Run("node registers and is ready within 10s", func(t *testing.T) {
		start := time.Now()
		r, err := statusmgr.NewNodeReporter(nodeClient, statusmgr.NodeConfig{
			NodeName: nodeName, NodeIP: "127.0.0.1",
			Labels:  map[string]string{"node.kubernetes.io/pool": "edge"},
			Machine: statusmgr.MachineInfoFunc(func(context.Context) (statusmgr.Machine, error) { return machine, nil }),
			Runtime: versionFunc("fake://1.0"),
		})
		if err != nil {
			t.Fatal(err)
		}
		run("NodeReporter", r.Run)
		var node *v1.Node
		poll(t, 10*time.Second, func() (bool, error) {
			n, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			node = n
			return err == nil && readyStatus(n) == v1.ConditionTrue, err
		})
		t.Logf("node %s Ready %v after start", nodeName, time.Since(start).Round(time.Millisecond))
		for name, want := range map[v1.ResourceName]string{
			v1.ResourceCPU: "3", v1.ResourceMemory: "6Gi", v1.ResourceEphemeralStorage: "40Gi", v1.ResourcePods: "110", "hugepages-2Mi": "32Mi",
		} {
			if got := node.Status.Capacity[name]; got.Cmp(resource.MustParse(want)) != 0 {
				t.Errorf("capacity %s = %s, want %s", name, got.String(), want)
			}
		}
		if got := node.Status.Allocatable[v1.ResourceMemory]; got.Cmp(resource.MustParse("6112Mi")) != 0 {
			t.Errorf("allocatable memory = %s, want 6Gi - 32Mi of huge pages", got.String())
		}
		if node.Labels["node.kubernetes.io/pool"] != "edge" || node.Labels[v1.LabelHostname] != nodeName {
			t.Errorf("labels = %v", node.Labels)
		}
		if info := node.Status.NodeInfo; info.ContainerRuntimeVersion != "fake://1.0" || info.KubeletVersion != "v1.37.2" {
			t.Errorf("nodeInfo = %+v", info)
		}

		// In a steady state the status read back from the API server
		// compares equal to the computed one: syncs send nothing.
		for range 3 {
			if err := r.SyncOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		before, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := r.SyncOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		after, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("unchanged node status was written again (resourceVersion %s -> %s)", before.ResourceVersion, after.ResourceVersion)
		}
	})

	t.Run("restart reconciles the existing node", func(t *testing.T) {
		r, err := statusmgr.NewNodeReporter(nodeClient, statusmgr.NodeConfig{NodeName: nodeName, NodeIP: "127.0.0.1",
			Labels:  map[string]string{"node.kubernetes.io/pool": "core"},
			Machine: statusmgr.MachineInfoFunc(func(context.Context) (statusmgr.Machine, error) { return machine, nil })})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Register(ctx); err != nil {
			t.Fatalf("registering again: %v", err)
		}
		n, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels["node.kubernetes.io/pool"] != "core" {
			t.Errorf("pool label = %q after re-registration, want core", n.Labels["node.kubernetes.io/pool"])
		}
	})

	t.Run("lease exists and is renewed", func(t *testing.T) {
		hb, err := statusmgr.NewHeartbeat(nodeClient, statusmgr.HeartbeatConfig{NodeName: nodeName, RenewInterval: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		run("Heartbeat", hb.Run)
		var first *coordinationv1.Lease
		poll(t, 10*time.Second, func() (bool, error) {
			l, err := admin.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, nodeName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			first = l
			return err == nil, err
		})
		if *first.Spec.HolderIdentity != nodeName || *first.Spec.LeaseDurationSeconds != 40 || len(first.OwnerReferences) != 1 {
			t.Errorf("lease = %+v / owners %+v", first.Spec, first.OwnerReferences)
		}
		poll(t, 10*time.Second, func() (bool, error) {
			l, err := admin.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, nodeName, metav1.GetOptions{})
			return err == nil && l.Spec.RenewTime.After(first.Spec.RenewTime.Time), err
		})
	})

	const ns = "nk"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod := func(t *testing.T, name string) *v1.Pod {
		t.Helper()
		p, err := admin.CoreV1().Pods(ns).Create(ctx, boundPod(name, nodeName), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	sink := statusmgr.NewAPISink(nodeClient)

	t.Run("pod status reaches the API server", func(t *testing.T) {
		pod := createPod(t, "web")
		pod.Status.Conditions = []v1.PodCondition{{Type: "example.com/lb", Status: v1.ConditionTrue, Reason: "Registered"}}
		pod, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		counted := &countingSink{StatusSink: sink}
		fromAPI := statusmgr.PodGetterFunc(func(uid types.UID) (*v1.Pod, bool) {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
			return p, err == nil && p.UID == uid
		})
		m, err := statusmgr.NewManager(statusmgr.Config{Sink: counted, Pods: fromAPI})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetPodStatus(pod, runningStatus(pod)); err != nil {
			t.Fatal(err)
		}
		if err := m.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		// What the API server stored compares equal to what the manager
		// holds: a resync sends nothing.
		if err := m.Resync(ctx); err != nil {
			t.Fatal(err)
		}
		if counted.sets != 1 {
			t.Errorf("%d status writes after a sync and a resync, want 1", counted.sets)
		}
		got, err := admin.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != v1.PodRunning || len(got.Status.ContainerStatuses) != 1 || !got.Status.ContainerStatuses[0].Ready {
			t.Errorf("status in the API server = %+v, want Running with a ready container", got.Status)
		}
		if c := findCondition(got.Status.Conditions, "example.com/lb"); c == nil || c.Status != v1.ConditionTrue {
			t.Errorf("a condition the node does not own was lost: %+v", got.Status.Conditions)
		}
		if c := findCondition(got.Status.Conditions, v1.PodReady); c == nil || c.Status != v1.ConditionTrue {
			t.Errorf("Ready condition = %+v", c)
		}
	})

	t.Run("status writes need no GET while nobody else writes the pod", func(t *testing.T) {
		var gets, patches atomic.Int32
		cfg := cp.NodeConfig(nodeName)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				if strings.Contains(r.URL.Path, "/pods/") {
					switch r.Method {
					case http.MethodGet:
						gets.Add(1)
					case http.MethodPatch:
						patches.Add(1)
					}
				}
				return rt.RoundTrip(r)
			})
		})
		client, err := kubeclient.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := statusmgr.NewAPISink(client)
		informed := createPod(t, "optimistic") // the caller's copy, as its informer has it
		pending := v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: "ContainersNotReady"}}}
		if err := s.SetPodStatus(ctx, informed, &pending); err != nil {
			t.Fatal(err)
		}
		// The caller's copy has not seen the first write yet.
		running := runningStatus(informed)
		if err := s.SetPodStatus(ctx, informed, &running); err != nil {
			t.Fatal(err)
		}
		if g, p := gets.Load(), patches.Load(); g != 0 || p != 2 {
			t.Errorf("%d GETs and %d PATCHes for two status writes, want 0 and 2", g, p)
		}
		got, err := admin.CoreV1().Pods(ns).Get(ctx, "optimistic", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != v1.PodRunning || len(got.Status.ContainerStatuses) != 1 {
			t.Fatalf("status = %+v, want Running with one container", got.Status)
		}

		// Someone else writes the pod (a condition of its own): the patch
		// against the version the sink knows is refused, it reads and
		// patches again, and keeps the other writer's condition.
		got.Status.Conditions = append(got.Status.Conditions, v1.PodCondition{Type: "example.com/lb", Status: v1.ConditionTrue})
		if _, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		running.Message = "changed"
		if err := s.SetPodStatus(ctx, informed, &running); err != nil {
			t.Fatal(err)
		}
		if g, p := gets.Load(), patches.Load(); g != 1 || p != 4 {
			t.Errorf("after another writer: %d GETs and %d PATCHes in all, want 1 and 4 (a refused patch, a read, a patch)", g, p)
		}
		got, err = admin.CoreV1().Pods(ns).Get(ctx, "optimistic", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Message != "changed" || findCondition(got.Status.Conditions, "example.com/lb") == nil {
			t.Errorf("status = %+v, want our message and the other writer's condition", got.Status)
		}
	})

	t.Run("a UID mismatch never touches a recreated pod", func(t *testing.T) {
		old := createPod(t, "victim")
		zero := int64(0)
		if err := admin.CoreV1().Pods(ns).Delete(ctx, "victim", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		recreated := createPod(t, "victim")

		// The patch itself carries the UID: sent raw to the new pod, the API
		// server refuses it.
		patch := fmt.Appendf(nil, `{"metadata":{"uid":%q},"status":{"phase":"Failed"}}`, old.UID)
		_, err := nodeClient.CoreV1().Pods(ns).Patch(ctx, "victim", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if err == nil {
			t.Fatal("a status patch with the old pod's UID was applied to the new pod")
		}
		t.Logf("status patch with a stale UID: %v (conflict %v, invalid %v)", err, apierrors.IsConflict(err), apierrors.IsInvalid(err))

		st := runningStatus(old)
		if err := sink.SetPodStatus(ctx, old, &st); err != nil {
			t.Errorf("status of the old pod: %v, want nil", err)
		}
		if err := sink.DeletePod(ctx, old); err != nil {
			t.Errorf("DeletePod of the old pod: %v, want nil", err)
		}
		got, err := admin.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the recreated pod was deleted: %v", err)
		}
		if got.UID != recreated.UID || got.Status.Phase == v1.PodRunning {
			t.Errorf("the recreated pod was modified: uid %s phase %s", got.UID, got.Status.Phase)
		}

		if err := sink.DeletePod(ctx, recreated); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("DeletePod with the matching UID left the pod: %v", err)
		}
		if err := sink.DeletePod(ctx, recreated); err != nil {
			t.Errorf("deleting it again: %v, want nil", err)
		}
		// A deleted pod is not readable with node credentials (403): the
		// sink patches blind and the 404 ends it.
		if err := sink.SetPodStatus(ctx, recreated, &st); err != nil {
			t.Errorf("status of a deleted pod: %v, want nil", err)
		}
	})

	t.Run("a gracefully deleted pod is removed once finished", func(t *testing.T) {
		pod := createPod(t, "graceful")
		m, err := statusmgr.NewManager(statusmgr.Config{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetPodStatus(pod, runningStatus(pod)); err != nil {
			t.Fatal(err)
		}
		if err := m.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if err := admin.CoreV1().Pods(ns).Delete(ctx, "graceful", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleting, err := admin.CoreV1().Pods(ns).Get(ctx, "graceful", metav1.GetOptions{})
		if err != nil || deleting.DeletionTimestamp == nil {
			t.Fatalf("pod after a graceful delete: %v, deletionTimestamp %v", err, deleting.DeletionTimestamp)
		}
		if err := m.SetPodStatus(deleting, runningStatus(deleting)); err != nil {
			t.Fatal(err)
		}
		if err := m.TerminatePod(deleting); err != nil {
			t.Fatal(err)
		}
		if err := m.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := admin.CoreV1().Pods(ns).Get(ctx, "graceful", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod deleted before its resources were reclaimed: %v", err)
		}
		if got.Status.Phase != v1.PodFailed {
			t.Errorf("phase = %s, want Failed after TerminatePod", got.Status.Phase)
		}
		if err := m.PodResourcesReclaimed(pod.UID); err != nil {
			t.Fatal(err)
		}
		if err := m.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, "graceful", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("finished pod still in the API server: %v", err)
		}
	})

	t.Run("mirror pod of a static pod", func(t *testing.T) {
		static := boundPod("static-web-"+nodeName, nodeName)
		static.Namespace = ns
		static.UID = "static-uid-1"
		static.Annotations = map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": "h1"}
		mc := statusmgr.NewMirrorClient(nodeClient, nodeName)
		if err := mc.CreateMirrorPod(ctx, static); err != nil {
			t.Fatal(err)
		}
		if err := mc.CreateMirrorPod(ctx, static); err != nil {
			t.Errorf("creating the same mirror pod again: %v", err)
		}
		mirror, err := admin.CoreV1().Pods(ns).Get(ctx, static.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if mirror.Annotations[v1.MirrorPodAnnotationKey] != "h1" || len(mirror.OwnerReferences) != 1 || mirror.OwnerReferences[0].UID != node.UID {
			t.Errorf("mirror pod = %+v", mirror.ObjectMeta)
		}

		mirrors := statusmgr.MirrorPodGetterFunc(func(full string) (*v1.Pod, bool) {
			if full != static.Name+"_"+ns {
				return nil, false
			}
			p, err := admin.CoreV1().Pods(ns).Get(ctx, static.Name, metav1.GetOptions{})
			return p, err == nil
		})
		m, err := statusmgr.NewManager(statusmgr.Config{Sink: sink, Mirrors: mirrors})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetPodStatus(static, runningStatus(static)); err != nil {
			t.Fatal(err)
		}
		if err := m.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		mirror, err = admin.CoreV1().Pods(ns).Get(ctx, static.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if mirror.Status.Phase != v1.PodRunning {
			t.Errorf("mirror pod phase = %s, want the static pod's Running", mirror.Status.Phase)
		}

		deleted, err := mc.DeleteMirrorPod(ctx, static.Name+"_"+ns, &mirror.UID)
		if err != nil || !deleted {
			t.Fatalf("DeleteMirrorPod = %v, %v", deleted, err)
		}
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, static.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("mirror pod still there: %v", err)
		}
	})

	t.Run("node credentials cannot create ordinary pods", func(t *testing.T) {
		_, err := nodeClient.CoreV1().Pods(ns).Create(ctx, boundPod("sneaky", nodeName), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("node creating a non-mirror pod: %v, want Forbidden", err)
		}
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// countingSink counts status writes on their way to a real sink.
type countingSink struct {
	nodekit.StatusSink
	sets int
}

func (c *countingSink) SetPodStatus(ctx context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	c.sets++
	return c.StatusSink.SetPodStatus(ctx, pod, st)
}

type versionFunc string

func (v versionFunc) Version(context.Context) (string, error) { return string(v), nil }

func poll(t *testing.T, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond()
	})
	if err != nil {
		t.Fatalf("condition not met within %v: %v", timeout, err)
	}
}

func readyStatus(n *v1.Node) v1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status
		}
	}
	return v1.ConditionUnknown
}

func findCondition(conds []v1.PodCondition, t v1.PodConditionType) *v1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func boundPod(name, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nk"},
		Spec: v1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: new(false),
			Containers:                   []v1.Container{{Name: "main", Image: "busybox:1.36", Command: []string{"sleep", "3600"}}},
		},
	}
}

// runningStatus is what a worker reports for pod's single container running
// and ready.
func runningStatus(pod *v1.Pod) v1.PodStatus {
	now := metav1.Now()
	return v1.PodStatus{
		Phase:  v1.PodRunning,
		HostIP: "127.0.0.1",
		PodIP:  "10.88.0.7",
		PodIPs: []v1.PodIP{{IP: "10.88.0.7"}},
		Conditions: []v1.PodCondition{
			{Type: v1.PodReadyToStartContainers, Status: v1.ConditionTrue},
			{Type: v1.PodInitialized, Status: v1.ConditionTrue},
			{Type: v1.PodReady, Status: v1.ConditionTrue},
			{Type: v1.ContainersReady, Status: v1.ConditionTrue},
			{Type: v1.PodScheduled, Status: v1.ConditionTrue},
		},
		ContainerStatuses: []v1.ContainerStatus{{
			Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
			ImageID:     "docker.io/library/busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000",
			ContainerID: "containerd://abc123", Ready: true, Started: new(true),
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		}},
	}
}
