package podconfig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// chanSource is a source that forwards what the test puts on ch.
type chanSource struct {
	name string
	ch   chan nodekit.PodUpdate
}

func newChanSource(name string) *chanSource {
	return &chanSource{name: name, ch: make(chan nodekit.PodUpdate)}
}

func (c *chanSource) Name() string { return c.name }

func (c *chanSource) Run(ctx context.Context, out chan<- nodekit.PodUpdate) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case u := <-c.ch:
			select {
			case out <- u:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// fakeAPI serves ConfigMaps, Secrets, Services and the Node from maps; down
// makes every call fail as an unreachable API server does.
type fakeAPI struct {
	mu         sync.Mutex
	down       bool
	hang       bool // calls block until their context ends
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	services   map[string][]*v1.Service
	node       *v1.Node
	calls      []string
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{configMaps: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}, services: map[string][]*v1.Service{}}
}

var errRefused = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")

func (f *fakeAPI) enter(ctx context.Context, call string) error {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	down, hang := f.down, f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if down {
		return errRefused
	}
	return nil
}

func (f *fakeAPI) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeAPI) GetConfigMap(ctx context.Context, ns, name string) (*v1.ConfigMap, error) {
	if err := f.enter(ctx, "configmap "+ns+"/"+name); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if o, ok := f.configMaps[ns+"/"+name]; ok {
		return o.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
}

func (f *fakeAPI) GetSecret(ctx context.Context, ns, name string) (*v1.Secret, error) {
	if err := f.enter(ctx, "secret "+ns+"/"+name); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if name == "forbidden" {
		return nil, apierrors.NewForbidden(v1.Resource("secrets"), name, errors.New("no relationship found"))
	}
	if o, ok := f.secrets[ns+"/"+name]; ok {
		return o.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
}

func (f *fakeAPI) ListServices(ctx context.Context, ns string) ([]*v1.Service, error) {
	if err := f.enter(ctx, "services "+ns); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*v1.Service
	for _, s := range f.services[ns] {
		out = append(out, s.DeepCopy())
	}
	return out, nil
}

func (f *fakeAPI) Node(ctx context.Context) (*v1.Node, error) {
	if err := f.enter(ctx, "node"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.node == nil {
		return nil, apierrors.NewNotFound(v1.Resource("node"), "node-a")
	}
	return f.node.DeepCopy(), nil
}

func (f *fakeAPI) CreateToken(ctx context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	if err := f.enter(ctx, "token "+ns+"/"+sa); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := req.DeepCopy()
	out.Status.Token = fmt.Sprintf("token-%d", len(f.calls))
	out.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(time.Hour))
	return out, nil
}

func checkpointConfig(path string, api *fakeAPI, onError ErrorHandler) CheckpointConfig {
	return CheckpointConfig{Path: path, NodeName: "node-a", ConfigMaps: api, Secrets: api, Services: api, Node: api, Tokens: api, OnError: onError}
}

// drain returns the updates ready on ch (the bubble is idle).
func drain(ch <-chan nodekit.PodUpdate) []nodekit.PodUpdate {
	var out []nodekit.PodUpdate
	for {
		select {
		case u := <-ch:
			out = append(out, u)
		default:
			return out
		}
	}
}

func readBack(t *testing.T, path string) *PodCheckpoint {
	t.Helper()
	cp, err := ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

func checkpointPodNames(cp *PodCheckpoint) []string { return podNames(cp.Pods) }

// With the API server unreachable, the checkpoint's pods are served after
// Wait and count as the source being seen; when the API server answers,
// the merger turns its SET into a REMOVE of the pod deleted meanwhile and
// an UPDATE of the changed one, and leaves the unchanged one alone.
func TestCheckpointSourceOfflineThenReconcile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "pod_checkpoint")
		keep, changed, gone := testPod("uid-keep", "keep"), testPod("uid-changed", "changed"), testPod("uid-gone", "gone")
		if err := WriteCheckpoint(path, &PodCheckpoint{NodeName: "node-a", Pods: []*v1.Pod{changed, gone, keep}}); err != nil {
			t.Fatal(err)
		}
		inner := newChanSource(nodekit.SourceAPI)
		src, err := NewCheckpointSource(inner, checkpointConfig(path, newFakeAPI(), nil))
		if err != nil {
			t.Fatal(err)
		}
		if src.Name() != nodekit.SourceAPI {
			t.Fatalf("Name() = %q, want the wrapped source's", src.Name())
		}
		m := New([]nodekit.Source{src})
		ctx, cancel := context.WithCancel(testContext(t))
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()

		synctest.Wait()
		if m.SeenAllSources() || len(drain(m.Updates())) != 0 {
			t.Fatal("the checkpoint was served before Wait passed")
		}
		time.Sleep(DefaultCheckpointWait)
		synctest.Wait()
		if got := summary(drain(m.Updates())); !slices.Equal(got, []string{"ADD api: uid-changed,uid-gone,uid-keep"}) {
			t.Fatalf("after Wait: %q, want the checkpoint's pods added", got)
		}
		if !m.SeenAllSources() {
			t.Fatal("the served checkpoint does not count as the source seen")
		}

		// The API server answers: "gone" was deleted meanwhile, "changed"
		// got a label.
		inner.ch <- set("", testPod("uid-changed", "changed", withLabel("v", "2")), testPod("uid-keep", "keep"))
		synctest.Wait()
		if got := summary(drain(m.Updates())); !slices.Equal(got, []string{"REMOVE api: uid-gone", "UPDATE api: uid-changed"}) {
			t.Fatalf("after the API server's SET: %q", got)
		}
		cp := readBack(t, path)
		if !slices.Equal(checkpointPodNames(cp), []string{"default/changed", "default/keep"}) || cp.Pods[0].Labels["v"] != "2" {
			t.Fatalf("checkpoint after the API server's SET: %q %v", checkpointPodNames(cp), cp.Pods[0].Labels)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
	})
}

// When the API server answers in time, its SET goes through and the
// checkpoint is never served; the file then holds the pods and what they
// reference, and forgets what a removed pod referenced.
func TestCheckpointSourceOnline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "pod_checkpoint")
		if err := WriteCheckpoint(path, &PodCheckpoint{NodeName: "node-a", Pods: []*v1.Pod{testPod("uid-old", "old")}}); err != nil {
			t.Fatal(err)
		}
		api := newFakeAPI()
		api.configMaps["default/settings"] = &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default", ResourceVersion: "1"}, Data: map[string]string{"k": "v"}}
		api.secrets["default/pull"] = &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: "default", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
		api.services["default"] = []*v1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.1"}}}
		api.node = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"zone": "edge"}}}
		inner := newChanSource(nodekit.SourceAPI)
		src, err := NewCheckpointSource(inner, checkpointConfig(path, api, nil))
		if err != nil {
			t.Fatal(err)
		}
		out := runSource(t, src)

		pod := testPod("uid-a", "a", func(p *v1.Pod) {
			p.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}}}
			p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "pull"}}
			p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler"}}
		})
		inner.ch <- set("", pod)
		u := <-out
		if u.Op != nodekit.SET || !slices.Equal(podNames(u.Pods), []string{"default/a"}) {
			t.Fatalf("forwarded %s %q", u.Op, podNames(u.Pods))
		}
		time.Sleep(DefaultCheckpointWait + time.Minute)
		synctest.Wait()
		if extra := drain(out); len(extra) != 0 {
			t.Fatalf("the checkpoint was served after the API server answered: %q", summary(extra))
		}
		cp := readBack(t, path)
		if !slices.Equal(checkpointPodNames(cp), []string{"default/a"}) || len(cp.Pods[0].ManagedFields) != 0 {
			t.Fatalf("checkpoint pods %q (managedFields %v)", checkpointPodNames(cp), cp.Pods[0].ManagedFields)
		}
		if len(cp.ConfigMaps) != 1 || cp.ConfigMaps[0].Data["k"] != "v" || len(cp.Secrets) != 1 || len(cp.Secrets[0].ManagedFields) != 0 {
			t.Fatalf("checkpoint objects: configMaps %v secrets %v", cp.ConfigMaps, cp.Secrets)
		}
		if len(cp.Services) != 1 || !slices.Equal(cp.ServiceNamespaces, []string{"default"}) || cp.Node == nil || cp.Node.Labels["zone"] != "edge" {
			t.Fatalf("checkpoint services %v in %v, node %v", cp.Services, cp.ServiceNamespaces, cp.Node)
		}

		// A changed ConfigMap read live reaches the file.
		api.mu.Lock()
		api.configMaps["default/settings"].Data["k"], api.configMaps["default/settings"].ResourceVersion = "v2", "2"
		api.mu.Unlock()
		if _, err := src.Objects().GetConfigMap(t.Context(), "default", "settings"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * minFlushInterval)
		synctest.Wait()
		if cp := readBack(t, path); cp.ConfigMaps[0].Data["k"] != "v2" {
			t.Fatalf("ConfigMap in the checkpoint after a live read: %v", cp.ConfigMaps[0].Data)
		}

		// The pod goes: so do its objects, from the file and the getters.
		inner.ch <- set("")
		<-out
		synctest.Wait()
		cp = readBack(t, path)
		if len(cp.Pods) != 0 || len(cp.ConfigMaps) != 0 || len(cp.Secrets) != 0 {
			t.Fatalf("after the pod was removed the checkpoint holds %d pods, %d configMaps, %d secrets", len(cp.Pods), len(cp.ConfigMaps), len(cp.Secrets))
		}
		api.setDown(true)
		if _, err := src.Objects().GetSecret(t.Context(), "default", "pull"); !errors.Is(err, errRefused) {
			t.Fatalf("Secret of a removed pod while the API server is down: %v, want the live error", err)
		}
	})
}

// A corrupt checkpoint is reported and never served: the source waits for
// the API server, and then overwrites the file.
func TestCheckpointSourceCorrupt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "pod_checkpoint")
		data, err := EncodeCheckpoint(&PodCheckpoint{NodeName: "node-a", Pods: []*v1.Pod{testPod("uid-a", "a")}})
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)-5] ^= 0x01 // inside the payload
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		onError, errs := errorsTo()
		inner := newChanSource(nodekit.SourceAPI)
		src, err := NewCheckpointSource(inner, checkpointConfig(path, newFakeAPI(), onError))
		if err != nil {
			t.Fatal(err)
		}
		out := runSource(t, src)
		synctest.Wait()
		if err := <-errs; !errors.Is(err, ErrCheckpointCorrupt) || !strings.Contains(err.Error(), path) {
			t.Fatalf("reported %v, want ErrCheckpointCorrupt naming the file", err)
		}
		time.Sleep(10 * DefaultCheckpointWait)
		synctest.Wait()
		if got := drain(out); len(got) != 0 {
			t.Fatalf("a corrupt checkpoint was served: %q", summary(got))
		}
		inner.ch <- set("", testPod("uid-b", "b"))
		if u := <-out; !slices.Equal(podNames(u.Pods), []string{"default/b"}) {
			t.Fatalf("forwarded %q", podNames(u.Pods))
		}
		synctest.Wait()
		if cp := readBack(t, path); !slices.Equal(checkpointPodNames(cp), []string{"default/b"}) {
			t.Fatalf("checkpoint after the API server answered: %q", checkpointPodNames(cp))
		}
	})
}

// A checkpoint of another node, or of another format version, is reported
// and ignored.
func TestCheckpointSourceIgnoresForeignCheckpoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		data func(t *testing.T) []byte
		want string
	}{
		{"another node", func(t *testing.T) []byte {
			b, err := EncodeCheckpoint(&PodCheckpoint{NodeName: "node-b", Pods: []*v1.Pod{testPod("uid-a", "a")}})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}, `of node "node-b"`},
		{"another version", func(t *testing.T) []byte {
			return []byte(`{"version":99,"checksum":"sha256:00","payload":{}}`)
		}, ErrCheckpointVersion.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "pod_checkpoint")
				if err := os.WriteFile(path, tc.data(t), 0o600); err != nil {
					t.Fatal(err)
				}
				onError, errs := errorsTo()
				src, err := NewCheckpointSource(newChanSource("api"), checkpointConfig(path, newFakeAPI(), onError))
				if err != nil {
					t.Fatal(err)
				}
				out := runSource(t, src)
				synctest.Wait()
				if err := <-errs; !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("reported %v, want %q", err, tc.want)
				}
				time.Sleep(2 * DefaultCheckpointWait)
				synctest.Wait()
				if got := drain(out); len(got) != 0 {
					t.Fatalf("served %q", summary(got))
				}
			})
		})
	}
}

// The getters serve the checkpoint only when the API server cannot be
// asked; its answers (NotFound, Forbidden) are passed on.
func TestCheckpointObjects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "pod_checkpoint")
		pod := testPod("uid-a", "a", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{
				{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "vol"}}}},
				{Name: "proj", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "forbidden"}}}}}}},
			}
			p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "S", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "env"}, Key: "k"}}}}
		})
		err := WriteCheckpoint(path, &PodCheckpoint{
			NodeName:          "node-a",
			Pods:              []*v1.Pod{pod},
			ConfigMaps:        []*v1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: "vol", Namespace: "default"}, Data: map[string]string{"f": "from-checkpoint"}}},
			Secrets:           []*v1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "env", Namespace: "default"}}, {ObjectMeta: metav1.ObjectMeta{Name: "forbidden", Namespace: "default"}}},
			ServiceNamespaces: []string{"default"},
			Node:              &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"zone": "edge"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		api := newFakeAPI()
		api.setDown(true)
		src, err := NewCheckpointSource(newChanSource("api"), checkpointConfig(path, api, nil))
		if err != nil {
			t.Fatal(err)
		}
		out := runSource(t, src)
		synctest.Wait()
		o := src.Objects()
		ctx := t.Context()

		cm, err := o.GetConfigMap(ctx, "default", "vol")
		if err != nil || cm.Data["f"] != "from-checkpoint" {
			t.Fatalf("ConfigMap while down: %v, %v", cm, err)
		}
		cm.Data["f"] = "scribbled" // the caller owns it
		if again, _ := o.GetConfigMap(ctx, "default", "vol"); again.Data["f"] != "from-checkpoint" {
			t.Fatal("a returned object shares memory with the checkpoint")
		}
		if _, err := o.GetConfigMap(ctx, "default", "unknown"); !errors.Is(err, errRefused) {
			t.Fatalf("unknown ConfigMap while down: %v, want the live error", err)
		}
		if svcs, err := o.ListServices(ctx, "default"); err != nil || len(svcs) != 0 {
			t.Fatalf("Services of a namespace listed empty: %v, %v", svcs, err)
		}
		if _, err := o.ListServices(ctx, "never-listed"); !errors.Is(err, errRefused) {
			t.Fatalf("Services of a namespace never listed: %v, want the live error", err)
		}
		if n, err := o.Node(ctx); err != nil || n.Labels["zone"] != "edge" {
			t.Fatalf("Node while down: %v, %v", n, err)
		}

		// A read that hangs is cut at ReadTimeout and served.
		api.mu.Lock()
		api.hang = true
		api.mu.Unlock()
		start := time.Now()
		if _, err := o.GetSecret(ctx, "default", "env"); err != nil {
			t.Fatalf("Secret after a hanging read: %v", err)
		}
		if took := time.Since(start); took != DefaultCheckpointReadTimeout {
			t.Errorf("the hanging read took %v, want ReadTimeout (%v)", took, DefaultCheckpointReadTimeout)
		}
		api.mu.Lock()
		api.hang = false
		api.mu.Unlock()

		// The API server answers again: its answers win.
		api.setDown(false)
		if _, err := o.GetSecret(ctx, "default", "forbidden"); !apierrors.IsForbidden(err) {
			t.Fatalf("Forbidden secret: %v, want the API server's Forbidden", err)
		}
		if _, err := o.GetConfigMap(ctx, "default", "vol"); !apierrors.IsNotFound(err) {
			t.Fatalf("ConfigMap deleted meanwhile: %v, want NotFound", err)
		}
		api.setDown(true)
		if _, err := o.GetConfigMap(ctx, "default", "vol"); !errors.Is(err, errRefused) {
			t.Fatalf("a ConfigMap the API server said was gone is still served: %v", err)
		}
		_ = out
	})
}

// Service account tokens are kept for the pods they are bound to and served
// while the API server is unreachable, for the same request only.
func TestCheckpointTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "pod_checkpoint")
		api := newFakeAPI()
		inner := newChanSource("api")
		src, err := NewCheckpointSource(inner, checkpointConfig(path, api, nil))
		if err != nil {
			t.Fatal(err)
		}
		out := runSource(t, src)
		pod := testPod("uid-a", "a", func(p *v1.Pod) { p.Spec.ServiceAccountName = "robot" })
		inner.ch <- set("", pod)
		<-out
		exp := int64(3600)
		req := func(uid types.UID) *authenticationv1.TokenRequest {
			return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
				Audiences: []string{"api"}, ExpirationSeconds: &exp,
				BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "a", UID: uid},
			}}
		}
		o := src.Objects()
		live, err := o.CreateToken(t.Context(), "default", "robot", req("uid-a"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * minFlushInterval)
		synctest.Wait()
		cp := readBack(t, path)
		if len(cp.Tokens) != 1 || cp.Tokens[0].Token.Status.Token != live.Status.Token || cp.Tokens[0].ServiceAccount != "robot" {
			t.Fatalf("checkpointed tokens: %+v", cp.Tokens)
		}

		api.setDown(true)
		got, err := o.CreateToken(t.Context(), "default", "robot", req("uid-a"))
		if err != nil || got.Status.Token != live.Status.Token {
			t.Fatalf("token while down: %v, %v", got, err)
		}
		if _, err := o.CreateToken(t.Context(), "default", "robot", req("uid-other")); !errors.Is(err, errRefused) {
			t.Fatalf("token for another pod while down: %v, want the live error", err)
		}

		// The pod goes; so does its token.
		inner.ch <- set("")
		<-out
		synctest.Wait()
		if cp := readBack(t, path); len(cp.Tokens) != 0 {
			t.Fatalf("a removed pod's token is still checkpointed: %+v", cp.Tokens)
		}
		if _, err := o.CreateToken(t.Context(), "default", "robot", req("uid-a")); !errors.Is(err, errRefused) {
			t.Fatalf("a removed pod's token is still served: %v", err)
		}
	})
}

// Without a file the source forwards and keeps its copies in memory: the
// getters serve them through an outage, and nothing is written or served.
func TestCheckpointSourceInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI()
		api.services["default"] = []*v1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.1"}}}
		inner := newChanSource("api")
		src, err := NewCheckpointSource(inner, checkpointConfig("", api, nil))
		if err != nil {
			t.Fatal(err)
		}
		out := runSource(t, src)
		time.Sleep(2 * DefaultCheckpointWait)
		synctest.Wait()
		if got := drain(out); len(got) != 0 {
			t.Fatalf("served %q without a checkpoint", summary(got))
		}
		inner.ch <- set("", testPod("uid-a", "a"))
		<-out
		synctest.Wait() // the Services of the pod's namespace are read
		api.setDown(true)
		svcs, err := src.Objects().ListServices(t.Context(), "default")
		if err != nil || len(svcs) != 1 {
			t.Fatalf("Services during an outage: %v, %v", svcs, err)
		}
	})
}

// TestCheckpointSourceSharedPods: with SharedPods the source keeps the pods
// it forwards (a shallow copy without managedFields when they carry them,
// the forwarded pod untouched), without it a deep copy of each.
func TestCheckpointSourceSharedPods(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inner := newChanSource("api")
				cfg := checkpointConfig("", newFakeAPI(), nil)
				cfg.SharedPods = shared
				src, err := NewCheckpointSource(inner, cfg)
				if err != nil {
					t.Fatal(err)
				}
				out := runSource(t, src)
				a, b := testPod("uid-a", "a"), testPod("uid-b", "b")
				a.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
				inner.ch <- set("", a, b)
				u := <-out
				if u.Pods[0] != a || u.Pods[1] != b || len(a.ManagedFields) != 1 {
					t.Fatal("the forwarded update is not the wrapped source's, untouched")
				}
				nb := withPhaseOf(b, v1.PodRunning)
				inner.ch <- op(nodekit.RECONCILE, "", nb)
				<-out
				src.mu.Lock()
				keptA, keptB := src.pods["uid-a"], src.pods["uid-b"]
				src.mu.Unlock()
				if keptA.ManagedFields != nil || keptA.Name != "a" {
					t.Errorf("kept a: managedFields %v, name %q; want none, a", keptA.ManagedFields, keptA.Name)
				}
				if keptB.Status.Phase != v1.PodRunning {
					t.Errorf("kept b: phase %q, want the update's Running", keptB.Status.Phase)
				}
				sharesA := &keptA.Spec.Containers[0] == &a.Spec.Containers[0]
				if sharesA != shared || (keptB == nb) != shared {
					t.Errorf("kept a shares the forwarded spec: %v, kept b is the forwarded object: %v; want %v for both", sharesA, keptB == nb, shared)
				}
			})
		})
	}
}

// withPhaseOf is a newer version of pod with phase.
func withPhaseOf(pod *v1.Pod, phase v1.PodPhase) *v1.Pod {
	p := pod.DeepCopy()
	p.Status.Phase = phase
	return p
}
