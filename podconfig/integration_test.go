package podconfig_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/podconfig"
)

// TestAPISourceIntegration runs the API source and the merger against a real
// kube-apiserver, with the node's own credentials (Node authorizer and
// NodeRestriction on), and checks what a node agent sees of a pod's life.
func TestAPISourceIntegration(t *testing.T) {
	const node = "node-a"
	cp := agenttest.StartControlPlane(t, agenttest.WithNodes(node))
	admin := cp.AdminClient()
	ctx := t.Context()

	// The ServiceAccount admission plugin wants the namespace's default
	// ServiceAccount, which a controller-manager would create; none runs.
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx,
		&v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create default service account: %v", err)
	}
	newPod := func(name, nodeName string) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Spec: v1.PodSpec{
				NodeName:                     nodeName,
				AutomountServiceAccountToken: ptr.To(false),
				Containers:                   []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			},
		}
	}
	pods := admin.CoreV1().Pods("default")
	other, err := pods.Create(ctx, newPod("elsewhere", "node-b"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod on node-b: %v", err)
	}

	nodeClient, err := kubeclient.New(cp.NodeConfig(node), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := podconfig.New([]nodekit.Source{podconfig.NewAPISource(nodeClient, node)})
	logger, _ := ktesting.NewTestContext(t)
	runCtx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run = %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}()

	var seen []string // every update, as "OP name,name"
	next := func(what string) nodekit.PodUpdate {
		t.Helper()
		select {
		case u := <-m.Updates():
			line := u.Op.String()
			for _, p := range u.Pods {
				line += " " + p.Name
				if p.UID == other.UID {
					t.Errorf("pod %s bound to node-b arrived: %s", p.Name, line)
				}
			}
			seen = append(seen, line)
			return u
		case <-time.After(30 * time.Second):
			t.Fatalf("timed out waiting for %s; updates so far %q", what, seen)
			return nodekit.PodUpdate{}
		}
	}
	expect := func(what string, op nodekit.Op, uid types.UID) *v1.Pod {
		t.Helper()
		u := next(what)
		if u.Op != op || u.Source != nodekit.SourceAPI || len(u.Pods) != 1 || u.Pods[0].UID != uid {
			t.Fatalf("%s: got %s from %q with %d pods; want %s of %s from api (updates so far %q)", what, u.Op, u.Source, len(u.Pods), op, uid, seen)
		}
		return u.Pods[0]
	}

	if u := next("the first (empty) update"); u.Op != nodekit.ADD || len(u.Pods) != 0 {
		t.Fatalf("first update %s with %d pods, want an empty ADD", u.Op, len(u.Pods))
	}
	if !m.SeenAllSources() {
		t.Error("not SeenAllSources after the API source listed")
	}

	web, err := pods.Create(ctx, newPod("web", node), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod on %s: %v", node, err)
	}
	added := expect("ADD of web", nodekit.ADD, web.UID)
	if added.Annotations[podconfig.ConfigSourceAnnotation] != "api" || added.Annotations[podconfig.ConfigSeenAnnotation] == "" {
		t.Errorf("added pod annotations %v: want config.source=api and config.seen", added.Annotations)
	}

	if _, err := pods.Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"gold"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("label web: %v", err)
	}
	if got := expect("UPDATE after a label change", nodekit.UPDATE, web.UID); got.Labels["tier"] != "gold" {
		t.Errorf("updated labels %v, want tier=gold", got.Labels)
	}

	cur, err := pods.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.Message = "status only"
	if _, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update web status: %v", err)
	}
	if got := expect("RECONCILE after a status change", nodekit.RECONCILE, web.UID); got.Status.Message != "status only" {
		t.Errorf("reconciled status message %q", got.Status.Message)
	}

	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
		t.Fatalf("delete web: %v", err)
	}
	deleted := expect("DELETE after a graceful delete", nodekit.DELETE, web.UID)
	if deleted.DeletionTimestamp == nil || ptr.Deref(deleted.DeletionGracePeriodSeconds, -1) != 30 {
		t.Errorf("deleted pod: deletionTimestamp %v, grace %v; want set, 30", deleted.DeletionTimestamp, deleted.DeletionGracePeriodSeconds)
	}

	// Nothing else arrives: no second ADD of web, nothing of node-b's pod.
	select {
	case u := <-m.Updates():
		t.Errorf("unexpected update %s with %d pods; before it %q", u.Op, len(u.Pods), seen)
	default:
	}
	adds := 0
	for _, line := range seen {
		if line == "ADD web" {
			adds++
		}
	}
	if adds != 1 {
		t.Errorf("web was added %d times, want once: %q", adds, seen)
	}
	t.Logf("updates: %s", fmt.Sprintf("%q", seen))
}
