package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodekit/nodekit/internal/localcp"
	"github.com/nodekit/nodekit/internal/localcri"
)

const (
	demoName    = "demo"
	demoStatic  = "demo-static"
	demoTimeout = 3 * time.Minute
)

// progress prints one line per step with the time since start.
type progress struct {
	w     io.Writer
	start time.Time
}

func (p progress) say(format string, args ...any) {
	fmt.Fprintf(p.w, "[%5.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// upControllers starts kube-controller-manager and kube-scheduler next to
// the control plane unless they run already, so that Deployments get pods
// and pods get a node. Without their binaries it says so and goes on.
func upControllers(ctx context.Context, cp *localcp.ControlPlane, stdout io.Writer) error {
	kcm, sched, err := localcp.ControllerBinaries("")
	if err != nil {
		fmt.Fprintf(stdout, "no controller manager or scheduler (%v): pods of Deployments will not be created or scheduled; run make tools\n", err)
		return nil
	}
	live, err := localcp.LiveProcesses(cp.Dir)
	if err != nil {
		return err
	}
	running := map[string]bool{}
	for _, p := range live {
		running[p.Name] = true
	}
	for _, c := range []struct {
		name  string
		start func() error
	}{
		{localcp.ProcControllerManager, func() error { return cp.StartControllerManager(ctx, kcm) }},
		{localcp.ProcScheduler, func() error { return cp.StartScheduler(ctx, sched) }},
	} {
		if running[c.name] {
			fmt.Fprintf(stdout, "%s already up\n", c.name)
			continue
		}
		if err := c.start(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s up (log %s)\n", c.name, localcp.LogPath(cp.Dir, c.name))
	}
	return nil
}

// agentPidFile is where hack/run-agent.sh --background records the agent.
func agentPidFile(dir string) string { return filepath.Join(dir, "agent", "fullagent.pid") }

// downAgent stops the agent run-agent.sh --background started: SIGTERM,
// then SIGKILL after 30 s. The pidfile's process must still be fullagent
// (a reused pid is left alone).
func downAgent(ctx context.Context, dir string, stdout io.Writer) error {
	path := agentPidFile(dir)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(stdout, "agent already down")
		return nil
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("agent pidfile %s: %q is not a pid", path, b)
	}
	if !isAgent(pid) {
		fmt.Fprintf(stdout, "agent already down (pid %d is gone)\n", pid)
		return os.Remove(path)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	gone := func(context.Context) (bool, error) { return !isAgent(pid), nil }
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, gone); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, gone); err != nil {
			return fmt.Errorf("agent pid %d did not stop", pid)
		}
	}
	fmt.Fprintf(stdout, "agent stopped (pid %d)\n", pid)
	return os.Remove(path)
}

// agentAlive returns an error with the tail of the agent's log when the
// agent run-agent.sh --background started is no longer running; nil when
// it runs, or when no pidfile says one was started in the background.
func agentAlive(dir string) error {
	b, err := os.ReadFile(agentPidFile(dir))
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err == nil && isAgent(pid) {
		return nil
	}
	logPath := filepath.Join(dir, "agent", "fullagent.log")
	log, _ := os.ReadFile(logPath)
	lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return fmt.Errorf("fullagent (pid %s) exited; the end of %s:\n%s", strings.TrimSpace(string(b)), logPath, strings.Join(lines, "\n"))
}

// isAgent reports whether pid is a live fullagent process (not a zombie).
func isAgent(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(cmdline) == 0 {
		return false
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return filepath.Base(string(argv0)) == "fullagent"
}

// demo runs a static pod and a Deployment on node and waits for both to
// be Running, then shows the pods and that logs and exec work.
func demo(ctx context.Context, dir, node string, stdout io.Writer) error {
	p := progress{w: stdout, start: time.Now()}
	cp, err := localcp.Attach(ctx, controlPlaneDir(dir))
	if err != nil {
		return fmt.Errorf("control plane not up (make up): %w", err)
	}
	client, err := kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	// An agent that exits fails the demo at once, with its log's tail.
	go func() {
		for ctx.Err() == nil {
			if err := agentAlive(dir); err != nil {
				fmt.Fprintln(stdout, err)
				cancel()
				return
			}
			time.Sleep(time.Second)
		}
	}()
	if err := waitNodeReady(ctx, client, node); err != nil {
		return err
	}
	p.say("node %s is Ready", node)
	manifests := filepath.Join(dir, "agent", "manifests")
	if err := writeStaticPod(manifests); err != nil {
		return err
	}
	p.say("static pod %s written to %s", demoStatic, manifests)
	if err := ensureDeployment(ctx, client); err != nil {
		return err
	}
	p.say("deployment %s created", demoName)
	mirror, err := waitRunning(ctx, client, "component="+demoStatic, node)
	if err != nil {
		return fmt.Errorf("static pod: %w", err)
	}
	p.say("static pod %s Running", mirror.Name)
	pod, err := waitRunning(ctx, client, "app="+demoName, node)
	if err != nil {
		return fmt.Errorf("deployment pod: %w", err)
	}
	p.say("deployment pod %s Running on %s (pod IP %s)", pod.Name, node, pod.Status.PodIP)
	if err := checkLogsAndExec(ctx, cp, client, mirror); err != nil {
		return err
	}
	p.say("kubectl logs and exec work on %s", mirror.Name)
	fmt.Fprintf(stdout, "\n  export KUBECONFIG=%s\n\n", cp.AdminKubeconfig)
	return showPods(ctx, client, cp.AdminKubeconfig, stdout)
}

func waitNodeReady(ctx context.Context, client kubernetes.Interface, node string) error {
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready within %v (is the agent running? hack/run-agent.sh): %w", node, demoTimeout, err)
	}
	return nil
}

// writeStaticPod drops the demo static pod's manifest into the agent's
// staticPodPath.
func writeStaticPod(manifests string) error {
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: default
  labels:
    component: %[1]s
spec:
  containers:
  - name: app
    image: %[2]s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo hello from a static pod; while true; do sleep 3600; done"]
`, demoStatic, localcri.BusyboxImage)
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(manifests, demoStatic+".yaml"), []byte(manifest), 0o644)
}

// ensureDeployment creates the demo Deployment (agnhost serving HTTP on
// 8080) unless it exists.
func ensureDeployment(ctx context.Context, client kubernetes.Interface) error {
	labels := map[string]string{"app": demoName}
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: demoName, Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{Containers: []v1.Container{{
					Name: "web", Image: localcri.AgnhostImage, ImagePullPolicy: v1.PullIfNotPresent,
					Args:  []string{"netexec", "--http-port=8080"},
					Ports: []v1.ContainerPort{{ContainerPort: 8080}},
				}}},
			},
		},
	}
	_, err := client.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, d, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// waitRunning waits for a pod with the label selector on node to be
// Running with its containers ready.
func waitRunning(ctx context.Context, client kubernetes.Interface, selector, node string) (*v1.Pod, error) {
	var found *v1.Pod
	var last string
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			last = fmt.Sprintf("%s: %s on %q", pod.Name, pod.Status.Phase, pod.Spec.NodeName)
			if pod.Spec.NodeName == node && pod.Status.Phase == v1.PodRunning && pod.DeletionTimestamp == nil {
				found = pod
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no pod %s Running on %s within %v (last seen: %s)", selector, node, demoTimeout, last)
	}
	return found, nil
}

// checkLogsAndExec reads the static pod's log line and runs a command in
// it through the API server, as kubectl logs and kubectl exec do.
func checkLogsAndExec(ctx context.Context, cp *localcp.ControlPlane, client kubernetes.Interface, pod *v1.Pod) error {
	var logs []byte
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		logs, err = client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &v1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && strings.Contains(string(logs), "hello from a static pod"), nil
	})
	if err != nil {
		return fmt.Errorf("kubectl logs %s: %q", pod.Name, logs)
	}
	req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&v1.PodExecOptions{Container: "app", Command: []string{"echo", "exec works"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	// As kubectl v1.37: WebSocket (v5), which the API server hands to the
	// node as it is when the node declares ExtendWebSocketsToKubelet.
	ex, err := remotecommand.NewWebSocketExecutor(cp.Admin, "GET", req.URL().String())
	if err != nil {
		return err
	}
	var out, errOut bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil || out.String() != "exec works\n" {
		return fmt.Errorf("kubectl exec %s -- echo: stdout %q, stderr %q: %w", pod.Name, out.String(), errOut.String(), err)
	}
	return nil
}

// showPods prints kubectl get pods -A, or the same columns without kubectl.
func showPods(ctx context.Context, client kubernetes.Interface, kubeconfig string, stdout io.Writer) error {
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		fmt.Fprintln(stdout, "$ kubectl get pods -A -o wide")
		cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "get", "pods", "-A", "-o", "wide")
		cmd.Stdout, cmd.Stderr = stdout, stdout
		return cmd.Run()
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-12s %-36s %-10s %-6s %s\n", "NAMESPACE", "NAME", "STATUS", "IP", "NODE")
	for _, pod := range pods.Items {
		fmt.Fprintf(stdout, "%-12s %-36s %-10s %-6s %s\n", pod.Namespace, pod.Name, pod.Status.Phase, pod.Status.PodIP, pod.Spec.NodeName)
	}
	return nil
}
