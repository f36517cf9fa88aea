package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/agenttest"
)

const testNode = "agent-node"

// env is one fullagent running in-process against a private kube-apiserver
// and containerd; subtests share it.
type env struct {
	client      kubernetes.Interface
	admin       *rest.Config // system:masters, whose client certificate the node API accepts
	manifests   string
	cri         *agenttest.Containerd
	nodeIP      string
	rootDir     string
	podLogs     string
	cancelAgent context.CancelFunc
	agentDone   chan error
	opts        *options // the running agent's, for restartAgent
}

// envOption changes a test agent's configuration: extra
// KubeletConfiguration lines or its flags.
type envOption struct {
	config string
	flags  func(*options)
	before func(*env) // runs before the agent starts
	// containerd pins the runtime (agenttest.ContainerdVersion16 or 2);
	// "" is $NODEKIT_CONTAINERD's choice.
	containerd string
	// cri are more options for the test's containerd (registry mirrors).
	cri []agenttest.ContainerdOption
	// cp are more options for the control plane (a controller manager).
	cp []agenttest.ControlPlaneOption
}

func startEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	var cpOpts []agenttest.ControlPlaneOption
	for _, o := range opts {
		cpOpts = append(cpOpts, o.cp...)
	}
	cp := agenttest.StartControlPlane(t, cpOpts...)
	var criOpts []agenttest.ContainerdOption
	for _, o := range opts {
		if o.containerd != "" {
			criOpts = append(criOpts, agenttest.WithContainerdVersion(o.containerd))
		}
		criOpts = append(criOpts, o.cri...)
	}
	cri := agenttest.StartContainerd(t, criOpts...)
	client := cp.AdminClient()
	// No controller-manager runs: give the namespace what it would.
	cp.SeedNamespace(t, "default")
	dir := t.TempDir()
	agenttest.UnmountBelowOnCleanup(t, dir)
	e := &env{client: client, admin: rest.CopyConfig(cp.Admin), manifests: filepath.Join(dir, "manifests"), cri: cri, nodeIP: cri.Gateway.String(), rootDir: filepath.Join(dir, "root")}
	if err := os.MkdirAll(e.manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.yaml")
	writeFile(t, config, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
podLogsDir: %s
fileCheckFrequency: 2s
syncFrequency: 20s
address: %s
cgroupRoot: %s
authentication:
  x509:
    clientCAFile: %s
`, filepath.Join(dir, "logs"), e.nodeIP, agenttest.CgroupRoot(t), cp.CAFile)+extraConfig(opts))
	e.podLogs = filepath.Join(dir, "logs")
	o, err := parseFlags([]string{"--kubeconfig=" + cp.NodeKubeconfig(testNode), "--config=" + config, "--hostname-override=" + testNode,
		"--node-ip=" + e.nodeIP, "--root-dir=" + e.rootDir, "--container-runtime-endpoint=" + cri.Endpoint, "--pod-manifest-path=" + e.manifests}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// A system bus of the test's own, where nothing listens: an agent of
	// a test never reaches the host's systemd or logind (no inhibitor
	// lock, no logind drop-in), whatever the host runs.
	o.systemBus = "unix:path=" + filepath.Join(dir, "no_system_bus")
	for _, op := range opts {
		if op.flags != nil {
			op.flags(o)
		}
		if op.before != nil {
			op.before(e)
		}
	}
	e.opts = o
	e.startAgent()
	t.Cleanup(func() { e.stopAgent(t) })
	return e
}

// startAgent runs the agent with e's options until stopAgent.
func (e *env) startAgent() {
	actx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	done := make(chan error, 1)
	e.cancelAgent, e.agentDone = cancel, done
	go func() { done <- run(actx, e.opts) }()
}

// stopAgent stops the agent and waits for it (30s at most).
func (e *env) stopAgent(t *testing.T) {
	e.cancelAgent()
	select {
	case err := <-e.agentDone:
		if err != nil {
			t.Errorf("agent: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("agent did not stop within 30s")
	}
}

// restartAgent stops the agent and starts a new one over the same root
// dir, runtime and API server, as a restart of the node agent.
func (e *env) restartAgent(t *testing.T) {
	t.Helper()
	e.stopAgent(t)
	e.startAgent()
}

func extraConfig(opts []envOption) string {
	var b strings.Builder
	for _, op := range opts {
		b.WriteString(op.config)
	}
	return b.String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitPod polls the API server until cond holds for the pod.
func (e *env) waitPod(t *testing.T, name string, timeout time.Duration, what string, cond func(*v1.Pod) bool) *v1.Pod {
	t.Helper()
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s: %s not reached within %v; last status: %s", name, what, timeout, describeStatus(last))
	}
	return last
}

func describeStatus(p *v1.Pod) string {
	if p == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s reason=%s msg=%q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	for _, c := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, " [%s restarts=%d ready=%v %+v]", c.Name, c.RestartCount, c.Ready, c.State)
	}
	return b.String()
}

func (e *env) createPod(t *testing.T, p *v1.Pod) {
	t.Helper()
	p.Namespace = "default"
	p.Spec.NodeName = testNode
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Image == "" {
			p.Spec.Containers[i].Image = agenttest.BusyboxImage
		}
	}
	for i := range p.Spec.InitContainers {
		if p.Spec.InitContainers[i].Image == "" {
			p.Spec.InitContainers[i].Image = agenttest.BusyboxImage
		}
	}
	if _, err := e.client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func simplePod(name string, policy v1.RestartPolicy, cmd string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{RestartPolicy: policy, Containers: []v1.Container{{
			Name: "app", Command: []string{"sh", "-c", cmd},
		}}},
	}
}

func containerStatus(p *v1.Pod, name string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func TestFullAgent(t *testing.T) {
	e := startEnv(t)

	t.Run("node registers Ready", func(t *testing.T) {
		err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("node not Ready within 10s: %v", err)
		}
		n, _ := e.client.CoreV1().Nodes().Get(t.Context(), testNode, metav1.GetOptions{})
		if n.Status.Capacity.Cpu().Value() < 1 || n.Status.Capacity.Pods().Value() != 110 || n.Status.NodeInfo.ContainerRuntimeVersion == "" {
			t.Fatalf("node status: capacity %v, nodeInfo %+v", n.Status.Capacity, n.Status.NodeInfo)
		}
		// kubelet v1.37.2's defaults less what fullagent does not act on
		// (declaredfeatures.go).
		if want := []string{"ExtendWebSocketsToKubelet", "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}; !slices.Equal(n.Status.DeclaredFeatures, want) {
			t.Fatalf("node status.declaredFeatures = %v, want %v", n.Status.DeclaredFeatures, want)
		}
	})

	t.Run("busybox pod runs", func(t *testing.T) {
		e.createPod(t, simplePod("run", v1.RestartPolicyAlways, "sleep 3600"))
		p := e.waitPod(t, "run", 60*time.Second, "Running and Ready", func(p *v1.Pod) bool {
			c := containerStatus(p, "app")
			return p.Status.Phase == v1.PodRunning && c != nil && c.Ready
		})
		c := containerStatus(p, "app")
		if p.Status.PodIP == "" || p.Status.HostIP != e.nodeIP || !strings.HasPrefix(c.ContainerID, "containerd://") || c.ImageID == "" || c.State.Running == nil || c.Started == nil || !*c.Started {
			t.Fatalf("status: podIP=%q hostIP=%q %+v", p.Status.PodIP, p.Status.HostIP, c)
		}
		if !e.cri.Subnet.Contains(netIP(p.Status.PodIP)) {
			t.Fatalf("pod IP %s not on the CNI bridge %v", p.Status.PodIP, e.cri.Subnet)
		}
		want := map[v1.PodConditionType]bool{v1.PodReady: true, v1.ContainersReady: true, v1.PodInitialized: true, v1.PodScheduled: true, v1.PodReadyToStartContainers: true}
		for _, cond := range p.Status.Conditions {
			if want[cond.Type] && cond.Status != v1.ConditionTrue {
				t.Errorf("condition %s = %s", cond.Type, cond.Status)
			}
			delete(want, cond.Type)
		}
		if len(want) != 0 {
			t.Errorf("missing conditions %v", want)
		}
		if p.Status.QOSClass != v1.PodQOSBestEffort || p.Status.StartTime == nil {
			t.Errorf("qos %q startTime %v", p.Status.QOSClass, p.Status.StartTime)
		}
	})

	t.Run("Never pod exits 0 then Succeeded", func(t *testing.T) {
		e.createPod(t, simplePod("ok", v1.RestartPolicyNever, "echo done"))
		p := e.waitPod(t, "ok", 60*time.Second, "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
		if c := containerStatus(p, "app"); c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 || c.State.Terminated.Reason != "Completed" {
			t.Fatalf("container: %+v", c.State)
		}
	})

	t.Run("Never pod exits 1 then Failed with message", func(t *testing.T) {
		pod := simplePod("fail", v1.RestartPolicyNever, "echo -n broken-on-purpose > /dev/termination-log; exit 1")
		e.createPod(t, pod)
		p := e.waitPod(t, "fail", 60*time.Second, "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		term := containerStatus(p, "app").State.Terminated
		if term == nil || term.ExitCode != 1 || term.Reason != "Error" || term.Message != "broken-on-purpose" {
			t.Fatalf("terminated state: %+v", term)
		}
	})

	t.Run("Always pod crash-loops", func(t *testing.T) {
		e.createPod(t, simplePod("crash", v1.RestartPolicyAlways, "exit 2"))
		p := e.waitPod(t, "crash", 90*time.Second, "CrashLoopBackOff with restarts", func(p *v1.Pod) bool {
			c := containerStatus(p, "app")
			return c != nil && c.RestartCount >= 2 && c.State.Waiting != nil && c.State.Waiting.Reason == "CrashLoopBackOff"
		})
		c := containerStatus(p, "app")
		if c.LastTerminationState.Terminated == nil || c.LastTerminationState.Terminated.ExitCode != 2 {
			t.Fatalf("last state: %+v", c.LastTerminationState)
		}
	})

	t.Run("init containers run in order", func(t *testing.T) {
		pod := simplePod("init", v1.RestartPolicyAlways, "sleep 3600")
		pod.Spec.InitContainers = []v1.Container{
			{Name: "first", Command: []string{"sh", "-c", "sleep 1"}},
			{Name: "second", Command: []string{"sh", "-c", "sleep 1"}},
		}
		e.createPod(t, pod)
		p := e.waitPod(t, "init", 60*time.Second, "Running after both init containers", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodRunning
		})
		first, second, app := containerStatus(p, "first"), containerStatus(p, "second"), containerStatus(p, "app")
		if first.State.Terminated == nil || second.State.Terminated == nil || app.State.Running == nil {
			t.Fatalf("states: %s", describeStatus(p))
		}
		if second.State.Terminated.StartedAt.Before(&first.State.Terminated.FinishedAt) ||
			app.State.Running.StartedAt.Before(&second.State.Terminated.FinishedAt) {
			t.Fatalf("not in order: first %v-%v, second %v-%v, app from %v",
				first.State.Terminated.StartedAt, first.State.Terminated.FinishedAt,
				second.State.Terminated.StartedAt, second.State.Terminated.FinishedAt, app.State.Running.StartedAt)
		}
	})

	t.Run("failing init container blocks the app", func(t *testing.T) {
		pod := simplePod("initfail", v1.RestartPolicyNever, "sleep 3600")
		pod.Spec.InitContainers = []v1.Container{{Name: "init", Command: []string{"sh", "-c", "exit 7"}}}
		e.createPod(t, pod)
		p := e.waitPod(t, "initfail", 60*time.Second, "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if c := containerStatus(p, "init"); c.State.Terminated == nil || c.State.Terminated.ExitCode != 7 {
			t.Fatalf("init: %+v", c.State)
		}
		if c := containerStatus(p, "app"); c.ContainerID != "" || c.State.Running != nil {
			t.Fatalf("app ran: %+v", c)
		}
	})

	t.Run("sidecar runs alongside", func(t *testing.T) {
		always := v1.ContainerRestartPolicyAlways
		pod := simplePod("sidecar", v1.RestartPolicyAlways, "sleep 3600")
		pod.Spec.InitContainers = []v1.Container{{Name: "side", Command: []string{"sh", "-c", "sleep 3600"}, RestartPolicy: &always}}
		e.createPod(t, pod)
		e.waitPod(t, "sidecar", 60*time.Second, "sidecar and app running", func(p *v1.Pod) bool {
			s, a := containerStatus(p, "side"), containerStatus(p, "app")
			return p.Status.Phase == v1.PodRunning && s != nil && s.State.Running != nil && a != nil && a.State.Running != nil
		})
	})

	t.Run("missing image with Never", func(t *testing.T) {
		pod := simplePod("noimage", v1.RestartPolicyAlways, "true")
		pod.Spec.Containers[0].Image = "registry.example/not-here:1"
		pod.Spec.Containers[0].ImagePullPolicy = v1.PullNever
		e.createPod(t, pod)
		e.waitPod(t, "noimage", 60*time.Second, "ErrImageNeverPull", func(p *v1.Pod) bool {
			c := containerStatus(p, "app")
			return c != nil && c.State.Waiting != nil && c.State.Waiting.Reason == "ErrImageNeverPull" && p.Status.Phase == v1.PodPending
		})
	})

	t.Run("a pod that cannot pull its image is deleted promptly", func(t *testing.T) {
		pod := simplePod("nopull", v1.RestartPolicyNever, "true")
		pod.Spec.Containers[0].Image = "registry.k8s.io/e2e-test-images/not-imported:1.0"
		pod.Spec.Containers[0].ImagePullPolicy = v1.PullIfNotPresent
		e.createPod(t, pod)
		e.waitPod(t, "nopull", 60*time.Second, "ErrImagePull or ImagePullBackOff", func(p *v1.Pod) bool {
			c := containerStatus(p, "app")
			return c != nil && c.State.Waiting != nil && (c.State.Waiting.Reason == "ErrImagePull" || c.State.Waiting.Reason == "ImagePullBackOff")
		})
		grace := int64(30)
		if err := e.client.CoreV1().Pods("default").Delete(t.Context(), "nopull", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
		var last *v1.Pod
		err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := e.client.CoreV1().Pods("default").Get(ctx, "nopull", metav1.GetOptions{})
			last = p
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("a pod with nothing running was not deleted within 20s: %s", describeStatus(last))
		}
	})

	t.Run("ephemeral container joins a running pod", func(t *testing.T) {
		e.createPod(t, simplePod("target", v1.RestartPolicyAlways, "sleep 10000"))
		p := e.waitPod(t, "target", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
			EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: agenttest.BusyboxImage, ImagePullPolicy: v1.PullNever,
				Command: []string{"sh", "-c", "while true; do echo polo; sleep 1; done"}, Stdin: true, TTY: true},
			TargetContainerName: "app",
		})
		if _, err := e.client.CoreV1().Pods("default").UpdateEphemeralContainers(t.Context(), "target", p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		p = e.waitPod(t, "target", 60*time.Second, "debugger running", func(p *v1.Pod) bool {
			return len(p.Status.EphemeralContainerStatuses) == 1 && p.Status.EphemeralContainerStatuses[0].State.Running != nil
		})
		if st := p.Status.EphemeralContainerStatuses[0]; st.Name != "debugger" || st.Ready || st.ContainerID == "" {
			t.Fatalf("ephemeral status: %+v", st)
		}
		if cs := containerStatus(p, "app"); cs == nil || cs.RestartCount != 0 || cs.State.Running == nil {
			t.Fatalf("the target container was disturbed: %s", describeStatus(p))
		}
		c := p.Status.EphemeralContainerStatuses[0]
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, c) // so exec finds it by name
		if out := e.exec(t, p, "debugger", "ps"); !strings.Contains(out, "sleep 10000") {
			t.Fatalf("the debugger does not share the target's process namespace; ps:\n%s", out)
		}
		err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			b, err := e.client.CoreV1().Pods("default").GetLogs("target", &v1.PodLogOptions{Container: "debugger"}).DoRaw(ctx)
			return err == nil && strings.Contains(string(b), "polo"), nil
		})
		if err != nil {
			t.Fatal("no debugger output through kubectl logs")
		}
	})

	t.Run("hostnameOverride names the pod's host", func(t *testing.T) {
		if !e.cri.HasImage(agenttest.GlibcDNSImage) {
			agenttest.RequireIntegration(t, "the glibc-dns-testing image", errors.New("the machine has no /usr/bin/hostname"))
		}
		pod := simplePod("override", v1.RestartPolicyNever, "echo $(hostname)';'$(hostname -f)';'")
		pod.Spec.Containers[0].Image = agenttest.GlibcDNSImage
		override := "override.example.host"
		pod.Spec.HostnameOverride = &override
		e.createPod(t, pod)
		e.waitPod(t, "override", 60*time.Second, "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
		b, err := e.client.CoreV1().Pods("default").GetLogs("override", &v1.PodLogOptions{Container: "app"}).DoRaw(t.Context())
		if want := override + ";" + override + ";"; err != nil || strings.TrimSpace(string(b)) != want {
			t.Fatalf("output %q, %v; want %q", b, err, want)
		}
	})

	t.Run("too much CPU is OutOfcpu", func(t *testing.T) {
		pod := simplePod("bigcpu", v1.RestartPolicyAlways, "sleep 3600")
		pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1000")}
		e.createPod(t, pod)
		p := e.waitPod(t, "bigcpu", 30*time.Second, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if p.Status.Reason != "OutOfcpu" || !strings.Contains(p.Status.Message, "cpu") {
			t.Fatalf("reason %q message %q", p.Status.Reason, p.Status.Message)
		}
	})

	t.Run("graceful delete of a SIGTERM-trapping container", func(t *testing.T) {
		e.createPod(t, simplePod("graceful", v1.RestartPolicyAlways, "trap 'echo bye; exit 0' TERM; while true; do sleep 0.2; done"))
		e.waitPod(t, "graceful", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		grace := int64(30)
		start := time.Now()
		if err := e.client.CoreV1().Pods("default").Delete(t.Context(), "graceful", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 40*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := e.client.CoreV1().Pods("default").Get(ctx, "graceful", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatal("pod object still there 40s after a delete with grace 30")
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("deletion took %v: the container was not stopped by SIGTERM", took)
		}
	})

	t.Run("missing configMap key blocks until it appears", func(t *testing.T) {
		pod := simplePod("cmkey", v1.RestartPolicyAlways, "echo $GREETING; sleep 3600")
		pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "GREETING", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "greetings"}, Key: "hello"}}}}
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "greetings"}, Data: map[string]string{"other": "x"}}
		if _, err := e.client.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.createPod(t, pod)
		p := e.waitPod(t, "cmkey", 60*time.Second, "CreateContainerConfigError", func(p *v1.Pod) bool {
			c := containerStatus(p, "app")
			return c != nil && c.State.Waiting != nil && c.State.Waiting.Reason == "CreateContainerConfigError"
		})
		if msg := containerStatus(p, "app").State.Waiting.Message; !strings.Contains(msg, "couldn't find key hello in ConfigMap default/greetings") {
			t.Fatalf("message %q", msg)
		}
		cm.Data["hello"] = "hi"
		if _, err := e.client.CoreV1().ConfigMaps("default").Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitPod(t, "cmkey", 90*time.Second, "Running after the key appeared", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	})

	t.Run("envFrom a ConfigMap and a Secret", func(t *testing.T) {
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "envfrom"}, Data: map[string]string{"DATA_1": "value-1"}}
		if _, err := e.client.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		sec := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "envfrom"}, StringData: map[string]string{"token": "t0p"}}
		if _, err := e.client.CoreV1().Secrets("default").Create(t.Context(), sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Debian's busybox 1.35 sh drops variables whose names are not
		// shell identifiers (data-1), so the keys here are.
		pod := simplePod("envfrom", v1.RestartPolicyNever, `test "$DATA_1$P_DATA_1$SECRET_token" = "value-1value-1t0p" || { env; exit 1; }`)
		ref := v1.LocalObjectReference{Name: "envfrom"}
		pod.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: ref}},
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: ref}, Prefix: "P_"},
			{SecretRef: &v1.SecretEnvSource{LocalObjectReference: ref}, Prefix: "SECRET_"},
		}
		e.createPod(t, pod)
		p := e.waitPod(t, "envfrom", 60*time.Second, "terminal", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
		})
		if p.Status.Phase != v1.PodSucceeded {
			t.Fatalf("envFrom variables missing: %s", describeStatus(p))
		}
	})

	t.Run("unsafe sysctl is forbidden", func(t *testing.T) {
		p := simplePod("sysctl", v1.RestartPolicyNever, "true")
		p.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.shmmax", Value: "100000"}}}
		e.createPod(t, p)
		got := e.waitPod(t, "sysctl", 30*time.Second, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if got.Status.Reason != "SysctlForbidden" || got.Status.Message != `Pod was rejected: forbidden sysctl: "kernel.shmmax" not allowlisted` {
			t.Fatalf("status: %s", describeStatus(got))
		}
	})

	t.Run("static pod gets a mirror pod", func(t *testing.T) {
		manifest := filepath.Join(e.manifests, "static.yaml")
		writeFile(t, manifest, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: static-web
  namespace: default
spec:
  containers:
  - name: app
    image: %s
    imagePullPolicy: Never
    command: ["sleep", "3600"]
`, agenttest.BusyboxImage))
		mirror := "static-web-" + testNode
		p := e.waitPod(t, mirror, 60*time.Second, "mirror pod Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		if _, ok := p.Annotations["kubernetes.io/config.mirror"]; !ok {
			t.Fatalf("mirror pod lacks the config.mirror annotation: %v", p.Annotations)
		}
		if err := os.Remove(manifest); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := e.client.CoreV1().Pods("default").Get(ctx, mirror, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatal("mirror pod still there 60s after the manifest was removed")
		}
	})
}

func netIP(s string) net.IP {
	return net.ParseIP(s)
}
