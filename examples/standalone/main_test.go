package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
)

// A manifest dropped into the directory runs on containerd; removing it
// stops the pod.
func TestStaticPodRunsOnContainerd(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	dir := t.TempDir()
	manifests, logs := filepath.Join(dir, "manifests"), filepath.Join(dir, "logs")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))))
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, config{endpoint: cri.Endpoint, manifests: manifests, rootDir: filepath.Join(dir, "root"), podLogsDir: logs, nodeName: "box"})
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v", err)
		}
		t.Logf("%s: agent stopped", time.Now().Format(time.StampMilli))
	}()

	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: hello
spec:
  terminationGracePeriodSeconds: 2 # sh as PID 1 ignores SIGTERM
  containers:
  - name: app
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", "echo hello from a static pod; sleep 3600"]
`, agenttest.BusyboxImage)
	path := filepath.Join(manifests, "hello.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}

	// Look with a CRI client of our own, as crictl would.
	rt, err := criruntime.New(t.Context(), criruntime.Config{Endpoint: cri.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.WithoutCancel(t.Context()))
	pod := waitPod(t, rt, "hello-box", true)
	t.Logf("%s: pod running", time.Now().Format(time.StampMilli))
	if len(pod.Containers) != 1 || pod.Containers[0].Name != "app" || pod.Containers[0].State != nodekit.StateRunning {
		t.Fatalf("pod hello-box: %+v", pod.Containers)
	}
	// Its output is in the pod log directory (NAMESPACE_NAME_UID/app/0.log).
	deadline := time.Now().Add(30 * time.Second)
	for {
		files, _ := filepath.Glob(filepath.Join(logs, "default_hello-box_*", "app", "0.log"))
		if len(files) == 1 {
			if b, _ := os.ReadFile(files[0]); strings.Contains(string(b), "hello from a static pod") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no container log with the greeting under %s: %v", logs, files)
		}
		time.Sleep(200 * time.Millisecond)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitPod(t, rt, "hello-box", false)
	t.Logf("%s: pod stopped", time.Now().Format(time.StampMilli))
}

// waitPod waits until the runtime does (or no longer does) run the pod.
func waitPod(t *testing.T, rt *criruntime.Runtime, name string, running bool) *nodekit.Pod {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		pods, err := rt.ListPods(t.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		var found *nodekit.Pod
		for _, p := range pods {
			// Running: a container runs. Stopped: not even the sandbox is left.
			if p.Name == name && (len(p.Containers) > 0 || !running) {
				found = p
			}
		}
		if (found != nil) == running {
			return found
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: running=%v not reached within 90s", name, running)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
