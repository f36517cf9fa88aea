package devicemgr_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/devicemgr"
	"github.com/nodekit/nodekit/devicemgr/deviceplugintest"
)

const foo = "example.com/foo"

// socketDir returns a directory short enough for unix socket paths.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type pods struct {
	mu   sync.Mutex
	list []*v1.Pod
}

func (p *pods) active() []*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.list)
}

func (p *pods) add(pod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, pod)
}

func fooPod(name string) *v1.Pod {
	one := resource.MustParse("1")
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{foo: one}, Limits: v1.ResourceList{foo: one},
		}}}},
	}
}

// waitResources waits, on the manager's change signal, until capacity
// and allocatable of foo are as wanted.
func waitResources(t *testing.T, m *devicemgr.Manager, capacity, allocatable int64) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		c, a, _ := m.Resources()
		cq, aq := c[foo], a[foo]
		if cq.Value() == capacity && aq.Value() == allocatable {
			return
		}
		select {
		case <-m.Changes():
		case <-timeout:
			t.Fatalf("capacity %s allocatable %s, want %d and %d", cq.String(), aq.String(), capacity, allocatable)
		}
	}
}

// options returns the FAKE_DEVICES variable and the device nodes the
// plugin's Allocate answer put in the container's options.
func options(t *testing.T, ctx context.Context, m *devicemgr.Manager, pod *v1.Pod) (env string, devices []nodekit.Device) {
	t.Helper()
	opts, err := m.ContainerOptions(ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatalf("ContainerOptions(%s): %v", pod.Name, err)
	}
	for _, e := range opts.Envs {
		if e.Name == deviceplugintest.DefaultEnv {
			env = e.Value
		}
	}
	return env, opts.Devices
}

const rejected = "Allocate failed due to requested number of devices unavailable for example.com/foo. Requested: 1, Available: 0, which is unexpected"

func TestEndToEnd(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir := socketDir(t)
	active := &pods{}

	m, err := devicemgr.New(ctx, devicemgr.Config{Dir: dir, ActivePods: active.active})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	plugin, err := deviceplugintest.New(deviceplugintest.Config{
		Resource: foo, Dir: dir, Devices: 2,
		Options: &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := plugin.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()
	if err := plugin.Register(ctx); err != nil {
		t.Fatal(err)
	}
	waitResources(t, m, 2, 2)

	p1, p2, p3 := fooPod("one"), fooPod("two"), fooPod("three")
	for _, p := range []*v1.Pod{p1, p2} {
		if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: p, Pods: active.active()}); !d.Admit {
			t.Fatalf("%s rejected: %+v", p.Name, d)
		}
		active.add(p)
	}
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: p3, Pods: active.active()}); d.Admit || d.Reason != "UnexpectedAdmissionError" || d.Message != rejected {
		t.Fatalf("third pod: %+v, want rejection %q", d, rejected)
	}
	env1, devs1 := options(t, ctx, m, p1)
	env2, devs2 := options(t, ctx, m, p2)
	if env1 == "" || env2 == "" || env1 == env2 {
		t.Fatalf("pods got devices %q and %q, want two distinct ones", env1, env2)
	}
	for env, devs := range map[string][]nodekit.Device{env1: devs1, env2: devs2} {
		want := []nodekit.Device{{PathOnHost: "/dev/null", PathInContainer: "/dev/fake/" + env, Permissions: "rw"}}
		if !slices.Equal(devs, want) {
			t.Errorf("devices %v, want %v", devs, want)
		}
	}
	if got := fmt.Sprint(plugin.Allocations()); got != fmt.Sprintf("[[%s] [%s]]", env1, env2) {
		t.Errorf("plugin Allocate calls %s", got)
	}
	if got := len(plugin.PreStarts()); got != 2 {
		t.Errorf("%d PreStartContainer calls, want 2", got)
	}

	// A bad registration is refused with a clear error.
	if err := register(ctx, dir, "cpu"); err == nil || !strings.Contains(err.Error(), `the ResourceName "cpu" is invalid`) {
		t.Errorf("registering cpu: %v", err)
	}

	// Agent restart: a new manager over the same directory.
	m.Stop()
	clk := testingclock.NewFakeClock(time.Now())
	m2, err := devicemgr.New(ctx, devicemgr.Config{Dir: dir, ActivePods: active.active, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if env, _ := options(t, ctx, m2, p1); env != env1 {
		t.Errorf("after restart pod one has %q, want %q", env, env1)
	}
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m2.Stop()
	waitResources(t, m2, 0, 0) // until the plugin registers again
	// The plugin sees kubelet.sock recreated and registers again.
	plugin.Stop()
	if err := plugin.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := plugin.Register(ctx); err != nil {
		t.Fatal(err)
	}
	waitResources(t, m2, 2, 2)
	for p, want := range map[*v1.Pod]string{p1: env1, p2: env2} {
		if d := m2.Admit(ctx, nodekit.AdmitRequest{Pod: p, Pods: active.active()}); !d.Admit {
			t.Errorf("%s rejected after restart: %+v", p.Name, d)
		}
		if env, _ := options(t, ctx, m2, p); env != want {
			t.Errorf("%s has %q after restart, want %q", p.Name, env, want)
		}
	}
	if d := m2.Admit(ctx, nodekit.AdmitRequest{Pod: p3, Pods: active.active()}); d.Admit || d.Reason != "UnexpectedAdmissionError" || d.Message != rejected {
		t.Errorf("third pod after restart: %+v", d)
	}
	if n := len(plugin.Allocations()); n != 2 {
		t.Errorf("%d Allocate calls, want still 2", n)
	}

	// The plugin stops: its devices are unhealthy, then gone after the
	// grace period.
	plugin.Stop()
	waitResources(t, m2, 2, 0)
	clk.Step(devicemgr.DefaultGracePeriod + time.Second)
	timeout := time.After(20 * time.Second)
	for {
		c, _, removed := m2.Resources()
		if slices.Equal(removed, []string{foo}) {
			if _, ok := c[foo]; ok {
				t.Errorf("removed resource still in capacity")
			}
			break
		}
		select {
		case <-m2.Changes():
		case <-timeout:
			t.Fatal("resource not removed after the grace period")
		}
	}
}

// A second plugin registering the same resource replaces the first.
func TestReregistrationReplaces(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := socketDir(t)
	m, err := devicemgr.New(ctx, devicemgr.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	first, _ := deviceplugintest.New(deviceplugintest.Config{Resource: foo, Dir: dir, Devices: 2, Socket: "a.sock"})
	second, _ := deviceplugintest.New(deviceplugintest.Config{Resource: foo, Dir: dir, Devices: 3, Socket: "b.sock"})
	for _, p := range []*deviceplugintest.Plugin{first, second} {
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		if err := p.Register(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitResources(t, m, 3, 3)
	// The first plugin going away does not touch the second's devices.
	first.Stop()
	second.SetHealthy("dev-2", false)
	waitResources(t, m, 3, 2)
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: fooPod("x")}); !d.Admit {
		t.Fatalf("rejected: %+v", d)
	}
	if got := fmt.Sprint(second.Allocations(), first.Allocations()); got != "[[dev-0]] []" {
		t.Errorf("allocations (second, first) = %s", got)
	}
}

// register sends a raw registration request for resource.
func register(ctx context.Context, dir, resource string) error {
	conn, err := grpc.NewClient("unix://"+dir+"/"+devicemgr.SocketName, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: "x.sock", ResourceName: resource,
	}, grpc.WaitForReady(true))
	return err
}

// Start, Stop and Run: a manager can be started again after a stop, Run
// returns when its context ends, Stop without Start does nothing.
func TestLifecycle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := socketDir(t)
	m, err := devicemgr.New(ctx, devicemgr.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	m.Stop()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err == nil {
		t.Error("second Start succeeded")
	}
	m.Stop()
	m.Stop()
	if _, err := os.Stat(m.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("socket left after Stop: %v", err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- m.Run(runCtx) }()
	// A refused registration tells the server is up (and has removed the
	// sockets it found).
	if err := register(ctx, dir, "cpu"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("probe registration: %v", err)
	}
	plugin, _ := deviceplugintest.New(deviceplugintest.Config{Resource: foo, Dir: dir, Devices: 1})
	if err := plugin.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()
	if err := plugin.Register(ctx); err != nil {
		t.Fatal(err)
	}
	waitResources(t, m, 1, 1)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	waitResources(t, m, 1, 0) // stopping disconnects the plugins
}
