package kubeclient_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

// request is what the server saw of one request.
type request struct {
	Method, URL, Accept, ContentType string
	Body                             []byte
}

// recorder is an API server that answers every request with a small
// object and records it.
type recorder struct {
	mu   sync.Mutex
	seen []request
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.seen = append(r.seen, request{req.Method, req.URL.RequestURI(), req.Header.Get("Accept"), req.Header.Get("Content-Type"), body})
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"metadata":{"name":"answered","resourceVersion":"7"}}`)
}

func (r *recorder) take() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seen
	r.seen = nil
	return s
}

// calls are the requests a node agent makes, one per resource and verb
// kind, each returning the name of the object it got back ("" for none).
var calls = map[string]func(context.Context, kubeclient.Interface) (string, error){
	"get pod": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		p, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{ResourceVersion: "0"})
		return p.GetName(), err
	},
	"patch pod status": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		p, err := c.CoreV1().Pods("ns").Patch(ctx, "p", types.StrategicMergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
		return p.GetName(), err
	},
	"delete pod": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		zero := int64(0)
		return "", c.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: &zero})
	},
	"create mirror pod": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		p, err := c.CoreV1().Pods("ns").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "m"}}, metav1.CreateOptions{})
		return p.GetName(), err
	},
	"list pods on a node": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		l, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n", Limit: 500})
		return l.GetResourceVersion(), err
	},
	"update node status": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		n, err := c.CoreV1().Nodes().UpdateStatus(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, metav1.UpdateOptions{})
		return n.GetName(), err
	},
	"create event": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		e, err := c.CoreV1().Events("ns").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e"}, Reason: "Started"}, metav1.CreateOptions{})
		return e.GetName(), err
	},
	"get configmap": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
		return o.GetName(), err
	},
	"get secret": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.CoreV1().Secrets("ns").Get(ctx, "s", metav1.GetOptions{})
		return o.GetName(), err
	},
	"list services": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		l, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		return l.GetResourceVersion(), err
	},
	"create token": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		exp := int64(3600)
		tr, err := c.CoreV1().ServiceAccounts("ns").CreateToken(ctx, "sa", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"api"}, ExpirationSeconds: &exp,
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "p", UID: "u"}},
		}, metav1.CreateOptions{})
		return tr.GetName(), err
	},
	"get pvc": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "c", metav1.GetOptions{})
		return o.GetName(), err
	},
	"get pv": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.CoreV1().PersistentVolumes().Get(ctx, "v", metav1.GetOptions{})
		return o.GetName(), err
	},
	"update lease": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.CoordinationV1().Leases("kube-node-lease").Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, metav1.UpdateOptions{})
		return o.GetName(), err
	},
	"get csidriver": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.StorageV1().CSIDrivers().Get(ctx, "d", metav1.GetOptions{})
		return o.GetName(), err
	},
	"update csinode": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.StorageV1().CSINodes().Update(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, metav1.UpdateOptions{})
		return o.GetName(), err
	},
	"get volumeattachment": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.StorageV1().VolumeAttachments().Get(ctx, "va", metav1.GetOptions{})
		return o.GetName(), err
	},
	"create resourceslice": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.ResourceV1().ResourceSlices().Create(ctx, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "n-"}}, metav1.CreateOptions{})
		return o.GetName(), err
	},
	"get resourceclaim": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.ResourceV1().ResourceClaims("ns").Get(ctx, "rc", metav1.GetOptions{})
		return o.GetName(), err
	},
	"list runtimeclasses": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		l, err := c.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{})
		return l.GetResourceVersion(), err
	},
	"create csr": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-"}}, metav1.CreateOptions{})
		return o.GetName(), err
	},
	"create tokenreview": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "t"}}, metav1.CreateOptions{})
		return o.GetName(), err
	},
	"watch pods on a node": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		timeout := int64(300)
		w, err := c.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n", ResourceVersion: "7", TimeoutSeconds: &timeout, AllowWatchBookmarks: true})
		if err == nil {
			w.Stop()
		}
		return "", err
	},
	"list pvcs with a timeout": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		timeout := int64(30)
		l, err := c.CoreV1().PersistentVolumeClaims("ns").List(ctx, metav1.ListOptions{TimeoutSeconds: &timeout})
		return l.GetResourceVersion(), err
	},
	"delete resourceslices of a node": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		return "", c.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=n"})
	},
	"update resourceclaim status": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.ResourceV1().ResourceClaims("ns").UpdateStatus(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "rc"}}, metav1.UpdateOptions{})
		return o.GetName(), err
	},
	"update node": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.CoreV1().Nodes().Update(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, metav1.UpdateOptions{FieldManager: "m"})
		return o.GetName(), err
	},
	"patch node": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.CoreV1().Nodes().Patch(ctx, "n", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
		return o.GetName(), err
	},
	"delete csr": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		return "", c.CertificatesV1().CertificateSigningRequests().Delete(ctx, "csr", metav1.DeleteOptions{})
	},
	"create subjectaccessreview": func(ctx context.Context, c kubeclient.Interface) (string, error) {
		o, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "u"}}, metav1.CreateOptions{})
		return o.GetName(), err
	},
}

// clientPair is a recorder and a Client and a clientset in front of it,
// without rate limits.
func clientPair(t *testing.T) (*recorder, *kubeclient.Client, *kubernetes.Clientset) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL, QPS: -1}
	lean, err := kubeclient.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rec, lean, cs
}

// TestRequestsAsTheClientsetMakesThem makes each call through a Client
// and through client-go's clientset, and wants the same request on the
// wire: method, path and query, content negotiation and body.
func TestRequestsAsTheClientsetMakesThem(t *testing.T) {
	rec, lean, cs := clientPair(t)
	for name, call := range calls {
		got, err := call(t.Context(), lean)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		leanReqs := rec.take()
		if _, err := call(t.Context(), clientgo.Wrap(cs)); err != nil {
			t.Errorf("%s through the clientset: %v", name, err)
			continue
		}
		if want := rec.take(); !reflect.DeepEqual(leanReqs, want) {
			t.Errorf("%s: requests\n%+v\nwant the clientset's\n%+v", name, leanReqs, want)
		}
		if len(leanReqs) != 1 {
			t.Errorf("%s: %d requests, want 1", name, len(leanReqs))
		}
		if got != "answered" && got != "7" && got != "" {
			t.Errorf("%s: decoded %q from the answer, want its name or resourceVersion", name, got)
		}
	}
}

// TestDecodesTheAnswer checks the object a call returns is the server's.
func TestDecodesTheAnswer(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	c, err := kubeclient.New(&rest.Config{Host: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "answered" || p.ResourceVersion != "7" {
		t.Errorf("got pod %q at %q, want the server's answered at 7", p.Name, p.ResourceVersion)
	}
	reqs := rec.take()
	if len(reqs) != 1 || reqs[0].URL != "/api/v1/namespaces/ns/pods/p" || !strings.HasPrefix(reqs[0].Accept, "application/vnd.kubernetes.protobuf") {
		t.Errorf("requests %+v, want one GET of /api/v1/namespaces/ns/pods/p preferring protobuf", reqs)
	}
}

// TestSchemeHasOnlyTheAgentsGroups checks the scheme knows the groups a
// node agent uses and none it does not: what keeps the binary small.
func TestSchemeHasOnlyTheAgentsGroups(t *testing.T) {
	s, err := kubeclient.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	for _, gvk := range []string{"/v1, Kind=Pod", "coordination.k8s.io/v1, Kind=Lease", "storage.k8s.io/v1, Kind=CSINode",
		"resource.k8s.io/v1, Kind=ResourceSlice", "node.k8s.io/v1, Kind=RuntimeClass",
		"certificates.k8s.io/v1, Kind=CertificateSigningRequest", "authentication.k8s.io/v1, Kind=TokenReview",
		"authorization.k8s.io/v1, Kind=SubjectAccessReview"} {
		found := false
		for k := range s.Runtime().AllKnownTypes() {
			if k.String() == gvk {
				found = true
			}
		}
		if !found {
			t.Errorf("scheme lacks %s", gvk)
		}
	}
	if s.Runtime().Recognizes(appsv1.SchemeGroupVersion.WithKind("Deployment")) {
		t.Error("scheme knows apps/v1 Deployment, a group no node agent reads")
	}
	// The codec round-trips a pod through protobuf, the wire format.
	info, ok := runtime.SerializerInfoForMediaType(s.Codecs().SupportedMediaTypes(), "application/vnd.kubernetes.protobuf")
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	var buf bytes.Buffer
	in := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	if err := s.Codecs().EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion).Encode(in, &buf); err != nil {
		t.Fatal(err)
	}
	out, _, err := s.Codecs().UniversalDeserializer().Decode(buf.Bytes(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := out.(*corev1.Pod); !ok || p.Name != "p" {
		t.Errorf("decoded %#v, want pod p", out)
	}
}
