package kubeclient_test

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/kubeclient"
)

// TestNodeAgentRequestsIntegration makes a node agent's requests through
// a Client with the node's own credentials against a real kube-apiserver
// (Node authorizer and NodeRestriction on): register the Node, watch its
// pods, write a pod's status, ask a token for the pod and have the API
// server review it, renew the Lease, publish the CSINode.
func TestNodeAgentRequestsIntegration(t *testing.T) {
	const node = "node-a"
	cp := agenttest.StartControlPlane(t, agenttest.WithNodes(node))
	ctx := t.Context()
	admin := cp.AdminClient()
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create default service account: %v", err)
	}
	c, err := kubeclient.New(cp.NodeConfig(node), nil)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the node: %v", err)
	}
	inf := cache.NewSharedIndexInformer(kubeclient.ListWatch(c, c.CoreV1().Nodes(), func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + node
	}), &corev1.Node{}, 0, cache.Indexers{})
	infCtx, stopInformer := context.WithCancel(ctx)
	defer stopInformer()
	go inf.RunWithContext(infCtx)
	if !cache.WaitForCacheSync(infCtx.Done(), inf.HasSynced) {
		t.Fatal("the node informer never synced")
	}
	if _, ok, _ := inf.GetStore().GetByKey(node); !ok {
		t.Error("the node informer lacks the node")
	}

	created, err := admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{NodeName: node, // the service account token volume is what allows the node its token request
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	watchFirst(t, c, node, created.UID)

	patched, err := c.CoreV1().Pods("default").Patch(ctx, "p", types.StrategicMergePatchType,
		[]byte(`{"metadata":{"uid":"`+string(created.UID)+`"},"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("patch the pod's status: %v", err)
	}
	if got, _ := admin.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{}); patched.Status.Phase != corev1.PodRunning || got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase after the patch: answer %q, stored %q; want Running", patched.Status.Phase, got.Status.Phase)
	}

	tr, err := c.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "p", UID: created.UID}},
	}, metav1.CreateOptions{})
	if err != nil || tr.Status.Token == "" {
		t.Fatalf("token for the pod: %v (token of %d bytes)", err, len(tr.Status.Token))
	}
	review, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token review: %v", err)
	}
	if !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:default:default" {
		t.Errorf("review of the pod's token: %+v, want the default service account", review.Status)
	}
	sar, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: "system:serviceaccount:default:default",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Resource: "nodes"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("subject access review: %v", err)
	}
	if sar.Status.Allowed {
		t.Error("a service account may delete nodes, says the review")
	}

	leases := c.CoordinationV1().Leases("kube-node-lease")
	l, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the lease: %v", err)
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("renew the lease: %v", err)
	}

	if _, err := c.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: nodeUID(t, c, node)}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatalf("publish the CSINode: %v", err)
	}
	if _, err := c.CoreV1().Pods("default").Get(ctx, "elsewhere", metav1.GetOptions{}); err == nil {
		t.Error("read a pod that does not exist")
	}
}

func nodeUID(t *testing.T, c kubeclient.Interface, name string) types.UID {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the node: %v", err)
	}
	return n.UID
}

// watchFirst watches the node's pods and wants the pod ADDED first. A
// fresh API server's watch cache may not have caught up with etcd yet
// and ends the watch with a "too large resource version" error; it
// watches again until 30 s have passed.
func watchFirst(t *testing.T, c kubeclient.Interface, node string, uid types.UID) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		w, err := c.CoreV1().Pods("").Watch(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			t.Fatalf("watch the node's pods: %v", err)
		}
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-time.After(time.Until(deadline)):
		}
		w.Stop()
		if p, ok := ev.Object.(*corev1.Pod); ev.Type == watch.Added && ok && p.UID == uid {
			return
		}
		if ev.Type != watch.Error || time.Now().After(deadline) {
			t.Fatalf("first watch event %s %+v, want the pod ADDED", ev.Type, ev.Object)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
