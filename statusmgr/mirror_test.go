package statusmgr

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

func typesUID(s string) types.UID { return types.UID(s) }

func staticPod(name, hash string) *v1.Pod {
	p := testPod(name, "c")
	p.Annotations[annotationConfigSource] = "file"
	p.Annotations[annotationConfigHash] = hash
	p.Labels = map[string]string{"app": "etcd"}
	return p
}

func TestCreateMirrorPod(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "node-uid"}}
	cs := fake.NewClientset(node)
	mc := NewMirrorClient(clientgo.Wrap(cs), "node1")
	static := staticPod("etcd-node1", "h1")

	if err := mc.CreateMirrorPod(t.Context(), static); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Pods("ns").Get(t.Context(), "etcd-node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[v1.MirrorPodAnnotationKey] != "h1" || got.Annotations[annotationConfigSource] != "file" || got.Labels["app"] != "etcd" {
		t.Errorf("mirror metadata = %+v, want the static pod's plus config.mirror=h1", got.ObjectMeta)
	}
	if got.Spec.NodeName != "node1" {
		t.Errorf("spec.nodeName = %q, want node1", got.Spec.NodeName)
	}
	refs := got.OwnerReferences
	if len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != "node-uid" || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("owner references = %+v, want the Node as controller", refs)
	}
	if static.Annotations[v1.MirrorPodAnnotationKey] != "" {
		t.Errorf("the static pod itself was modified")
	}

	if err := mc.CreateMirrorPod(t.Context(), static); err != nil {
		t.Errorf("creating the same mirror again: %v, want nil", err)
	}
	if err := mc.CreateMirrorPod(t.Context(), staticPod("etcd-node1", "h2")); !apierrors.IsAlreadyExists(err) {
		t.Errorf("creating over a mirror with another hash: %v, want AlreadyExists", err)
	}
	other := staticPod("x", "h")
	other.Spec.NodeName = "node2"
	if err := mc.CreateMirrorPod(t.Context(), other); !errors.Is(err, ErrInvalid) {
		t.Errorf("static pod of another node: %v, want ErrInvalid", err)
	}
}

func TestCreateMirrorPodNeedsTheNode(t *testing.T) {
	mc := NewMirrorClient(clientgo.Wrap(fake.NewClientset()), "node1")
	if err := mc.CreateMirrorPod(t.Context(), staticPod("etcd-node1", "h1")); !apierrors.IsNotFound(err) {
		t.Errorf("without a Node: %v, want its NotFound", err)
	}
}

func TestDeleteMirrorPod(t *testing.T) {
	mirror := staticPod("etcd-node1", "h1")
	cs := fake.NewClientset(mirror)
	mc := NewMirrorClient(clientgo.Wrap(cs), "node1")

	if _, err := mc.DeleteMirrorPod(t.Context(), "no-namespace", nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("malformed full name: %v, want ErrInvalid", err)
	}
	deleted, err := mc.DeleteMirrorPod(t.Context(), "etcd-node1_ns", &mirror.UID)
	if err != nil || !deleted {
		t.Fatalf("DeleteMirrorPod = %v, %v; want true, nil", deleted, err)
	}
	deleted, err = mc.DeleteMirrorPod(t.Context(), "etcd-node1_ns", nil)
	if err != nil || deleted {
		t.Errorf("deleting a missing mirror = %v, %v; want false, nil", deleted, err)
	}
}
