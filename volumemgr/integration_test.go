package volumemgr_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"golang.org/x/sys/unix"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/volumemgr"
)

// TestAPIServerIntegration mounts a pod's configMap, secret, emptyDir and
// service-account (projected) volumes on the real file system, reading
// everything as node n1 from a real kube-apiserver (Node authorizer and
// NodeRestriction on), with real tmpfs and bind mounts. Needs root.
func TestAPIServerIntegration(t *testing.T) {
	if os.Geteuid() != 0 {
		agenttest.RequireIntegration(t, "root (to mount tmpfs)", errors.New("mounting tmpfs needs root"))
	}
	cp := agenttest.StartControlPlane(t)
	admin := cp.AdminClient()
	nodeClient, err := kubeclient.New(cp.NodeConfig("n1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))))
	const ns = "default"

	// What kube-controller-manager would have made: the default service
	// account and the root CA ConfigMap.
	ca, err := os.ReadFile(cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, func() error {
		_, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(ca)}}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config"}, Data: map[string]string{"greeting": "hello"}}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-secret"}, StringData: map[string]string{"password": "s3cret"}}, metav1.CreateOptions{})
		return err
	})
	// The pod is bound to n1, so the Node authorizer lets n1 read what it
	// references. The ServiceAccount admission plugin adds its
	// kube-api-access projected volume.
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vols", Namespace: ns},
		Spec: v1.PodSpec{
			NodeName: "n1",
			Volumes: []v1.Volume{
				{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}}}},
				{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "app-secret", DefaultMode: ptr.To[int32](0o400)}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			},
			Containers: []v1.Container{{Name: "app", Image: "busybox", VolumeMounts: []v1.VolumeMount{
				{Name: "cfg", MountPath: "/etc/app"},
				{Name: "cfg", MountPath: "/etc/greeting", SubPath: "greeting"},
				{Name: "sec", MountPath: "/etc/secret"},
				{Name: "scratch", MountPath: "/scratch"},
			}}},
		},
	}
	pod, err = admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenVol := ""
	for _, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			tokenVol = v.Name
		}
	}
	if tokenVol == "" {
		t.Fatalf("the API server did not add a kube-api-access volume: %+v", pod.Spec.Volumes)
	}
	// The authorizer's graph learns of the pod asynchronously.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := nodeClient.CoreV1().ConfigMaps(ns).Get(ctx, "app-config", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("node n1 cannot read the pod's ConfigMap: %v", err)
	}

	root := t.TempDir()
	t.Cleanup(func() { detachAll(t, root) }) // runs before TempDir's removal
	clk := testingclock.NewFakeClock(time.Now())
	ev := &events{}
	c := volumemgr.FromClient(nodeClient)
	m, err := volumemgr.New(volumemgr.Config{RootDir: root, Objects: c, Tokens: c, Clock: clk, Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	m.AddPod(pod)
	m.Reconcile(ctx)
	if got := m.MountedVolumes(pod.UID); len(got) != 4 {
		t.Fatalf("mounted %+v; events %q", got, ev.all())
	}
	podDir := filepath.Join(root, "pods", string(pod.UID))
	cfgDir := volumemgr.VolumeDir(podDir, volumemgr.ConfigMapPluginName, "cfg")
	secDir := volumemgr.VolumeDir(podDir, volumemgr.SecretPluginName, "sec")
	tokDir := volumemgr.VolumeDir(podDir, volumemgr.ProjectedPluginName, tokenVol)

	// Content and modes.
	check := func(path, want string, mode os.FileMode) {
		t.Helper()
		if got := readFile(t, path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
		if got := fileMode(t, path).Perm(); got != mode {
			t.Errorf("%s mode = %v, want %v", path, got, mode)
		}
	}
	check(filepath.Join(cfgDir, "greeting"), "hello", 0o644)
	check(filepath.Join(secDir, "password"), "s3cret", 0o400)
	check(filepath.Join(tokDir, "ca.crt"), string(ca), 0o644)
	check(filepath.Join(tokDir, "namespace"), ns, 0o644)

	// Secrets and tokens on tmpfs, the ConfigMap on disk.
	mounts := hostMounts(t)
	if mounts[secDir] != "tmpfs" || mounts[tokDir] != "tmpfs" {
		t.Fatalf("secret and projected volumes must be tmpfs mounts: %v", mounts)
	}
	if _, ok := mounts[cfgDir]; ok {
		t.Fatal("the configMap volume is a mount point")
	}

	// Container mounts: a real subPath bind mount of the ConfigMap key, and
	// a refused escape from the emptyDir.
	ms, err := m.ContainerMounts(ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, ms[1].HostPath) != "hello" || hostMounts(t)[ms[1].HostPath] == "" || !ms[1].ReadOnly {
		t.Fatalf("subPath mount %+v is not a read-only bind of the key", ms[1])
	}
	scratch := volumemgr.VolumeDir(podDir, volumemgr.EmptyDirPluginName, "scratch")
	if err := os.Symlink("/etc", filepath.Join(scratch, "evil")); err != nil {
		t.Fatal(err)
	}
	escape := pod.DeepCopy()
	escape.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/x", SubPath: "evil"}}
	if _, err := m.ContainerMounts(ctx, escape, &escape.Spec.Containers[0]); err == nil {
		t.Fatal("a subPath symlink to /etc was mounted")
	}

	// The token is a JWT the API server accepts, bound to the pod.
	token := readFile(t, filepath.Join(tokDir, "token"))
	if parts := strings.Split(token, "."); len(parts) != 3 {
		t.Fatalf("token is not a JWT: %q", token)
	} else if claims, err := base64.RawURLEncoding.DecodeString(parts[1]); err != nil || !json.Valid(claims) {
		t.Fatalf("token claims: %v", err)
	}
	review, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:default:default" {
		t.Fatalf("TokenReview: %+v", review.Status)
	}
	if got := review.Status.User.Extra["authentication.kubernetes.io/pod-name"]; len(got) != 1 || got[0] != pod.Name {
		t.Fatalf("token not bound to the pod: extra %v", review.Status.User.Extra)
	}

	// A ConfigMap update shows after the refresh period.
	cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "app-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["greeting"] = "bonjour"
	if _, err := admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(volumemgr.DefaultRefreshPeriod)
	m.Reconcile(ctx)
	if got := readFile(t, filepath.Join(cfgDir, "greeting")); got != "bonjour" {
		t.Fatalf("after an update and a refresh: %q; events %q", got, ev.all())
	}

	// Gone: no mount, no volume directory left.
	// Teardown may need more than one pass (an unmount retried after a
	// back-off on a busy machine): reconcile, moving the clock past any
	// back-off, until the wait returns.
	m.RemovePod(pod.UID)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- m.WaitForUnmount(wctx, pod) }()
	for done := false; !done; {
		m.Reconcile(ctx)
		select {
		case err := <-waited:
			if err != nil {
				t.Fatalf("%v; events %q", err, ev.all())
			}
			done = true
		case <-time.After(100 * time.Millisecond):
			clk.Step(5 * time.Second)
		}
	}
	for p := range hostMounts(t) {
		if strings.HasPrefix(p, root+"/") {
			t.Errorf("still mounted: %s", p)
		}
	}
	for _, d := range []string{"volumes", "volume-subpaths", "plugins"} {
		if exists(filepath.Join(podDir, d)) {
			t.Errorf("%s left in the pod directory", d)
		}
	}
	if ev := ev.all(); len(ev) != 0 {
		t.Errorf("unexpected events: %q", ev)
	}
}

func mustCreate(t *testing.T, create func() error) {
	t.Helper()
	if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// hostMounts maps the host's mount points to their types.
func hostMounts(t *testing.T) map[string]string {
	t.Helper()
	mps, err := volumemgr.HostMounter{}.MountPoints(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, mp := range mps {
		out[mp.Path] = mp.Type
	}
	return out
}

// detachAll lazily unmounts whatever a failed test left below root, so
// the temporary directory can go.
func detachAll(t *testing.T, root string) {
	mps, err := volumemgr.HostMounter{}.MountPoints(context.Background())
	if err != nil {
		t.Error(err)
		return
	}
	var below []string
	for _, mp := range mps {
		if strings.HasPrefix(mp.Path, root+"/") {
			below = append(below, mp.Path)
		}
	}
	sort.Slice(below, func(i, j int) bool { return len(below[i]) > len(below[j]) })
	for _, p := range below {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			t.Errorf("detach %s: %v", p, err)
		}
	}
}

func TestMakeRShared(t *testing.T) {
	if os.Geteuid() != 0 {
		agenttest.RequireIntegration(t, "root (to mount)", errors.New("mounting needs root"))
	}
	dir := t.TempDir()
	t.Cleanup(func() {
		for mountedAt(t, dir) > 0 {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				t.Errorf("detach %s: %v", dir, err)
				return
			}
		}
	})
	h := volumemgr.HostMounter{}
	for range 2 { // idempotent
		if err := h.MakeRShared(t.Context(), dir); err != nil {
			t.Fatal(err)
		}
	}
	if n := mountedAt(t, dir); n != 1 {
		t.Fatalf("%s mounted %d times, want once", dir, n)
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 6 && f[4] == dir && !strings.Contains(line, " shared:") {
			t.Fatalf("%s is not shared: %s", dir, line)
		}
	}
}

// mountedAt counts the mounts on path.
func mountedAt(t *testing.T, path string) int {
	n := 0
	for _, mp := range mustMountPoints(t) {
		if mp.Path == path {
			n++
		}
	}
	return n
}

func mustMountPoints(t *testing.T) []volumemgr.MountPoint {
	t.Helper()
	mps, err := volumemgr.HostMounter{}.MountPoints(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return mps
}
