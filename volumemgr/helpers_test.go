package volumemgr_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/volumemgr"
	"github.com/nodekit/nodekit/volumemgr/volumemgrtest"
)

var epoch = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

// events records events as "TYPE REASON MESSAGE".
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) Eventf(_ runtime.Object, typ, reason, format string, args ...interface{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, typ+" "+reason+" "+fmt.Sprintf(format, args...))
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.list...)
}

type fixture struct {
	t      *testing.T
	ctx    context.Context
	root   string
	clk    *testingclock.FakeClock
	mnt    *volumemgrtest.Mounter
	objs   *volumemgrtest.Objects
	tokens *volumemgrtest.Tokens
	events *events
	m      *volumemgr.Manager
	cfg    volumemgr.Config
}

func newFixture(t *testing.T, adjust ...func(*volumemgr.Config)) *fixture {
	t.Helper()
	clk := testingclock.NewFakeClock(epoch)
	f := &fixture{
		t: t, ctx: klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig())),
		root: t.TempDir(), clk: clk, mnt: &volumemgrtest.Mounter{},
		objs: &volumemgrtest.Objects{}, tokens: &volumemgrtest.Tokens{Clock: clk}, events: &events{},
	}
	f.cfg = volumemgr.Config{RootDir: f.root, Objects: f.objs, Tokens: f.tokens, Mounter: f.mnt, Clock: clk, Events: f.events}
	for _, a := range adjust {
		a(&f.cfg)
	}
	m, err := volumemgr.New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

// restart returns a new Manager over the same root, mounter and objects, as
// after an agent restart.
func (f *fixture) restart() *volumemgr.Manager {
	f.t.Helper()
	m, err := volumemgr.New(f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

func (f *fixture) reconcile() { f.m.Reconcile(f.ctx) }

// step advances the fake clock and reconciles.
func (f *fixture) step(d time.Duration) {
	f.clk.Step(d)
	f.reconcile()
}

// mount adds the pod, reconciles once and requires its volumes mounted.
func (f *fixture) mount(pod *v1.Pod) {
	f.t.Helper()
	f.m.AddPod(pod)
	f.reconcile()
	ctx, cancel := context.WithCancel(f.ctx)
	cancel() // mounted already, or fail at once
	if err := f.m.WaitForAttachAndMount(ctx, pod); err != nil {
		f.t.Fatalf("volumes of %s not mounted: %v", pod.Name, err)
	}
}

// mounts returns the container's mounts.
func (f *fixture) mounts(pod *v1.Pod, container int) map[string]string {
	f.t.Helper()
	ms, err := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[container])
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range ms {
		out[m.Name] = m.HostPath
	}
	return out
}

func (f *fixture) podDir(uid types.UID) string { return filepath.Join(f.root, "pods", string(uid)) }

func (f *fixture) volumeDir(uid types.UID, plugin, name string) string {
	return volumemgr.VolumeDir(f.podDir(uid), plugin, name)
}

// testPod returns a pod with the volumes, each mounted by container "app"
// at /mnt/NAME.
func testPod(name string, vols ...v1.Volume) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{Volumes: vols, Containers: []v1.Container{{Name: "app"}}},
	}
	for _, v := range vols {
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: v.Name, MountPath: "/mnt/" + v.Name})
	}
	return p
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func contains(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func configMap(name string, data map[string]string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: data}
}

func secret(name string, data map[string]string) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}
