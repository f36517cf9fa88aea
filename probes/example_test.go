package probes_test

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/probes"
)

func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "app", Image: "busybox",
			ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{
				Exec: &v1.ExecAction{Command: []string{"cat", "/tmp/ready"}},
			}},
		}}},
	}
	id := nodekit.ContainerID{Type: "containerd", ID: "abc"}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

	// What statusmgr and criruntime would provide.
	status := probes.StatusGetterFunc(func(types.UID) (v1.PodStatus, bool) {
		return v1.PodStatus{
			Phase: v1.PodRunning, PodIP: "10.88.0.5",
			ContainerStatuses: []v1.ContainerStatus{{
				Name: "app", ContainerID: id.String(),
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(clk.Now())}},
			}},
		}, true
	})
	exec := probes.ExecerFunc(func(context.Context, nodekit.ContainerID, []string, time.Duration) ([]byte, []byte, int, error) {
		return []byte("ok"), nil, 0, nil // the file exists
	})

	m, err := probes.NewManager(probes.Config{Status: status, Execer: exec, Clock: clk})
	if err != nil {
		panic(err)
	}
	go func() { _ = m.Run(ctx) }()
	m.AddPod(ctx, pod)

	// The sync loop's side: a UID on Updates means "sync this pod again".
	for uid := range m.Updates() {
		if r, _ := m.Result(probes.Readiness, id); r == probes.Success {
			fmt.Println(uid, "readiness:", r)
			break
		}
	}
	r, ok := m.Result(probes.Liveness, id)
	fmt.Println("liveness:", r, ok)
	// Output:
	// uid-web readiness: Success
	// liveness: Unknown false
}

func ExampleHookRunner_Run() {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"}}
	c := &v1.Container{Name: "app", Lifecycle: &v1.Lifecycle{PostStart: &v1.LifecycleHandler{
		Exec: &v1.ExecAction{Command: []string{"sh", "-c", "touch /ready"}},
	}}}
	exec := probes.ExecerFunc(func(context.Context, nodekit.ContainerID, []string, time.Duration) ([]byte, []byte, int, error) {
		return nil, []byte("read-only file system"), 1, nil
	})
	r := probes.NewHookRunner(probes.HookConfig{Execer: exec})
	msg, err := r.Run(context.Background(), pod, c, nodekit.ContainerID{Type: "containerd", ID: "abc"}, "10.88.0.5", c.Lifecycle.PostStart)
	fmt.Println(err)
	fmt.Println(msg)
	// Output:
	// command 'sh -c touch /ready' exited with 1: read-only file system
	// Exec lifecycle hook ([sh -c touch /ready]) for Container "app" in Pod "web_default(uid-web)" failed - error: command 'sh -c touch /ready' exited with 1: read-only file system, message: "read-only file system"
}

func ExampleTerminationGracePeriod() {
	grace := int64(5)
	c := &v1.Container{Name: "app", LivenessProbe: &v1.Probe{TerminationGracePeriodSeconds: &grace}}
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{*c}}}
	fmt.Println(*probes.TerminationGracePeriod(pod, c, probes.Liveness))
	fmt.Println(probes.TerminationGracePeriod(pod, c, probes.Startup) == nil)
	// Output:
	// 5s
	// true
}
