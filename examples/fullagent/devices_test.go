package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/devicemgr/deviceplugintest"
)

const fooResource = "example.com/foo"

func fooPod(name string) *v1.Pod {
	p := simplePod(name, v1.RestartPolicyAlways, "sleep 3600")
	one := v1.ResourceList{fooResource: resource.MustParse("1")}
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: one, Limits: one}
	return p
}

// startFooPlugin serves two fake example.com/foo devices and registers
// them once the agent's registration socket is there.
func startFooPlugin(t *testing.T, root string) *deviceplugintest.Plugin {
	t.Helper()
	dir := filepath.Join(root, "device-plugins")
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(dir, "kubelet.sock"))
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("the agent never opened its device plugin registration socket")
	}
	p, err := deviceplugintest.New(deviceplugintest.Config{Resource: fooResource, Dir: dir, Devices: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if err := p.Register(t.Context()); err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *procEnv) waitAllocatable(t *testing.T, want int64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		q, ok := n.Status.Allocatable[fooResource]
		return ok && q.Value() == want, nil
	})
	if err != nil {
		t.Fatalf("node allocatable %s never became %d", fooResource, want)
	}
}

// TestDevicePlugin: a fake plugin registers two example.com/foo devices,
// which appear in the node's allocatable; two pods asking for one each get
// distinct devices (the plugin's Allocate answer reaches their
// environment); a third is rejected as upstream rejects it; after an agent
// restart the two pods keep running with the same devices (from the
// checkpoint), before and after the plugin registers again, and a new pod
// is still refused.
func TestDevicePlugin(t *testing.T) {
	e := startProcEnv(t)
	plugin := startFooPlugin(t, e.root)
	e.waitAllocatable(t, 2)

	e.createPod(t, fooPod("dev1"))
	e.createPod(t, fooPod("dev2"))
	isRunning := func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning }
	devices := map[string]string{}
	for _, name := range []string{"dev1", "dev2"} {
		p := e.waitPod(t, name, 60*time.Second, "Running", isRunning)
		devices[name] = strings.TrimSpace(e.exec(t, p, "app", "sh", "-c", "echo $"+deviceplugintest.DefaultEnv))
	}
	if devices["dev1"] == "" || devices["dev1"] == devices["dev2"] {
		t.Fatalf("devices: %v", devices)
	}
	e.createPod(t, fooPod("dev3"))
	p := e.waitPod(t, "dev3", 30*time.Second, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if p.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(p.Status.Message, "requested number of devices unavailable for example.com/foo") {
		t.Fatalf("third pod: %s", describeStatus(p))
	}
	if _, err := os.Stat(filepath.Join(e.root, "device-plugins", "kubelet_internal_checkpoint")); err != nil {
		t.Fatalf("no device checkpoint: %v", err)
	}

	before := map[string]string{}
	for _, name := range []string{"dev1", "dev2"} {
		before[name] = containerStatus(e.getPod(t, name), "app").ContainerID
	}
	e.agent.kill()
	plugin.Stop()
	e.agent.start()
	// Re-admitted with their checkpointed devices before the plugin is back.
	time.Sleep(5 * time.Second)
	plugin = startFooPlugin(t, e.root)
	e.waitAllocatable(t, 2)
	e.createPod(t, fooPod("dev4"))
	p = e.waitPod(t, "dev4", 30*time.Second, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if p.Status.Reason != "UnexpectedAdmissionError" {
		t.Fatalf("fourth pod after the restart: %s", describeStatus(p))
	}
	for _, name := range []string{"dev1", "dev2"} {
		p := e.waitPod(t, name, 10*time.Second, "Running", isRunning)
		cs := containerStatus(p, "app")
		if cs.ContainerID != before[name] || cs.RestartCount != 0 {
			t.Fatalf("%s was restarted across the agent restart: %s", name, describeStatus(p))
		}
		if got := strings.TrimSpace(e.exec(t, p, "app", "sh", "-c", "echo $"+deviceplugintest.DefaultEnv)); got != devices[name] {
			t.Fatalf("%s has devices %q after the restart, %q before", name, got, devices[name])
		}
	}
	_ = plugin
}
