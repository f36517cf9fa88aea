package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/dratest"
)

const draTestDriver = "dra.nodekit.test"

// TestDRAEndToEnd: kube-scheduler allocates the devices of the DRA test
// driver (agenttest/dratest, its own process, registered through
// ROOT/plugins_registry) to pods whose claims kube-controller-manager
// generates from a ResourceClaimTemplate, on containerd 2 (which injects
// CDI devices). Of two devices, two pods get one each (the env var the
// driver's CDI spec sets differs), a third stays unschedulable; deleting
// one pod unprepares its claim and the third runs. The podresources API
// lists a running pod's claim, and status.resourceClaimStatuses (the
// controller's) survives the agent's status updates. The agent killed with
// SIGKILL and restarted prepares no running pod's claim again (its
// checkpoint) and unprepares the claim of a pod force-deleted while it was
// down.
func TestDRAEndToEnd(t *testing.T) {
	e, drv := startDRAEnv(t, 2)
	ctx := t.Context()

	for _, name := range []string{"dra-a", "dra-b"} {
		createDRAPod(t, e, name)
	}
	devA := waitDRAPodDevice(t, e, "dra-a")
	devB := waitDRAPodDevice(t, e, "dra-b")
	if devA == devB {
		t.Fatalf("pods dra-a and dra-b both got device %s", devA)
	}
	claimA, claimB := podClaim(t, e, "dra-a"), podClaim(t, e, "dra-b")

	createDRAPod(t, e, "dra-c")
	e.waitPod(t, "dra-c", 2*time.Minute, "unschedulable", func(p *v1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})

	checkPodResourcesClaim(t, e, "dra-b", claimB)
	checkUnreservedClaimWaits(t, e, drv)

	if err := e.client.CoreV1().Pods("default").Delete(ctx, "dra-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, drv, 2*time.Minute, "unprepare of dra-a's claim", func(c []dratest.Call) bool {
		return dratest.Count(c, dratest.CallUnprepare, claimA.UID) == 1
	})
	devC := waitDRAPodDevice(t, e, "dra-c")
	if devC == devB {
		t.Fatalf("pod dra-c got dra-b's device %s", devC)
	}
	claimC := podClaim(t, e, "dra-c")

	// Down, a pod goes for good (no graceful deletion the agent would
	// finish): only the checkpoint knows its claim then.
	e.agent.kill()
	zero := int64(0)
	if err := e.client.CoreV1().Pods("default").Delete(ctx, "dra-b", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	e.agent.start()
	// The DRA manager reconciles every 60 s, as kubelet.
	calls := waitCalls(t, drv, 3*time.Minute, "unprepare of force-deleted dra-b's claim after the restart", func(c []dratest.Call) bool {
		return dratest.Count(c, dratest.CallUnprepare, claimB.UID) == 1
	})
	t.Logf("dra-b's claim unprepared %v after the restart; driver calls:", time.Since(restarted).Round(time.Second))
	for _, c := range calls {
		t.Logf("  %s %s %s %v", c.Call, c.Claim, c.UID, c.Devices)
	}
	if _, err := os.Stat(drv.CDISpec(string(claimB.UID))); err == nil {
		t.Errorf("dra-b's CDI spec %s is still there after its unprepare", drv.CDISpec(string(claimB.UID)))
	}
	for _, c := range []*resourceapi.ResourceClaim{claimA, claimB, claimC} {
		if n := dratest.Count(calls, dratest.CallPrepare, c.UID); n != 1 {
			t.Errorf("claim %s prepared %d times, want once (calls %+v)", c.Name, n, calls)
		}
	}
	p := e.waitPod(t, "dra-c", time.Minute, "running after the restart", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if cs := containerStatus(p, "app"); cs == nil || cs.RestartCount != 0 {
		t.Errorf("dra-c's container after the restart: %+v, want adopted (no restart)", cs)
	}
	checkPodResourcesClaim(t, e, "dra-c", claimC)
}

// checkUnreservedClaimWaits binds a pod to the node by nodeName, past the
// scheduler, with a ResourceClaim nobody allocated or reserved for it, as
// a claim allocated to no node or another node is: the agent calls no
// driver and the pod waits with upstream's FailedPrepareDynamicResources
// ("... is not allowed to use ResourceClaim ..."), its container never
// created.
func checkUnreservedClaimWaits(t *testing.T, e *procEnv, drv *dratest.Process) {
	t.Helper()
	ctx := t.Context()
	claimName := "unreserved"
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claimName, Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nodekit-test"}}},
		}},
	}
	c, err := e.client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dra-unreserved", Namespace: "default"},
		Spec: v1.PodSpec{
			NodeName:                      testNode,
			TerminationGracePeriodSeconds: new(int64(0)),
			ResourceClaims:                []v1.PodResourceClaim{{Name: "dev", ResourceClaimName: &claimName}},
			Containers: []v1.Container{{
				Name: "app", Image: agenttest.BusyboxImage, Command: []string{"sleep", "3600"},
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "dev"}}},
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("is not allowed to use ResourceClaim %s (%s)", claimName, c.UID)
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := e.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=dra-unreserved"})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.Reason == "FailedPrepareDynamicResources" && strings.HasPrefix(ev.Message, "Failed to prepare dynamic resources: ") && strings.Contains(ev.Message, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no FailedPrepareDynamicResources event saying %q for pod dra-unreserved", want)
	}
	got, err := e.client.CoreV1().Pods("default").Get(ctx, "dra-unreserved", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.PodPending {
		t.Errorf("dra-unreserved is %s, want Pending", got.Status.Phase)
	}
	for _, cs := range got.Status.ContainerStatuses {
		if cs.ContainerID != "" {
			t.Errorf("dra-unreserved's container %s was created: %+v", cs.Name, cs)
		}
	}
	calls, err := drv.Calls()
	if err != nil {
		t.Fatal(err)
	}
	if n := dratest.Count(calls, dratest.CallPrepare, c.UID); n != 0 {
		t.Errorf("the unreserved claim was prepared %d times, want never", n)
	}
	if err := e.client.CoreV1().Pods("default").Delete(ctx, "dra-unreserved", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
}

// startDRAEnv starts the agent with kube-scheduler and
// kube-controller-manager on containerd 2 (which injects CDI devices),
// the DRA test driver with devices devices once the node is Ready, and
// the DeviceClass and ResourceClaimTemplate of createDRAObjects.
func startDRAEnv(t *testing.T, devices int) (*procEnv, *dratest.Process) {
	t.Helper()
	e := startProcEnvOpts(t, procEnvOptions{
		// The API server's kubelet client reads container logs.
		config: "authentication:\n  x509:\n    clientCAFile: @CAFILE@\n",
		cp:     []agenttest.ControlPlaneOption{agenttest.WithControllerManager(), agenttest.WithScheduler()},
		cri:    []agenttest.ContainerdOption{agenttest.WithContainerdVersion(agenttest.ContainerdVersion2)},
	})
	waitNodeReady(t, e)
	bin, err := dratest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	drv := dratest.Start(t, bin, dratest.Options{
		Name: draTestDriver, NodeName: testNode, Devices: devices, CDIDir: e.cri.CDIDir,
		RegistryDir: filepath.Join(e.root, "plugins_registry"), Kubeconfig: e.cp.AdminKubeconfig,
	})
	createDRAObjects(t, e)
	return e, drv
}

// waitNodeReady waits for the agent's node to be Ready, so the scheduler
// considers it and the driver can own its slice by it.
func waitNodeReady(t *testing.T, e *procEnv) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
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
		t.Fatalf("node %s not Ready within 2m", testNode)
	}
}

// createDRAObjects creates the DeviceClass of the driver's devices and a
// ResourceClaimTemplate of one of them.
func createDRAObjects(t *testing.T, e *procEnv) {
	t.Helper()
	ctx := t.Context()
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "nodekit-test"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", draTestDriver)},
		}}},
	}
	if _, err := e.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-device", Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nodekit-test"}}},
		}}},
	}
	if _, err := e.client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createDRAPod creates a pod for the scheduler (no nodeName) with one
// claim from the template; its container prints the device it got.
func createDRAPod(t *testing.T, e *procEnv, name string) {
	t.Helper()
	tmpl := "one-device"
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(1)),
			ResourceClaims:                []v1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: &tmpl}},
			Containers: []v1.Container{{
				Name: "app", Image: agenttest.BusyboxImage,
				Command:   []string{"sh", "-c", "echo device=$DRA_DEVICE_DEV; exec sleep 3600"},
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "dev"}}},
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitDRAPodDevice waits for the pod to run and returns the device its
// container printed (from the env var the driver's CDI spec sets).
func waitDRAPodDevice(t *testing.T, e *procEnv, name string) string {
	t.Helper()
	e.waitPod(t, name, 3*time.Minute, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	var dev, last string
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := e.client.CoreV1().Pods("default").GetLogs(name, &v1.PodLogOptions{Container: "app"}).DoRaw(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		out := strings.TrimSpace(string(b))
		last = out
		if !strings.HasPrefix(out, "device=") {
			return false, nil
		}
		dev = strings.TrimPrefix(out, "device=")
		return true, nil
	})
	if err != nil {
		t.Fatalf("pod %s printed no device line within 1m; last: %s", name, last)
	}
	if !strings.HasPrefix(dev, "dev-") {
		t.Fatalf("pod %s printed device %q: the CDI env var did not reach the container", name, dev)
	}
	return dev
}

// podClaim returns the claim generated for the pod, checking
// status.resourceClaimStatuses names it and its allocation is this
// node's device.
func podClaim(t *testing.T, e *procEnv, name string) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := t.Context()
	p, err := e.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := p.Status.ResourceClaimStatuses
	if len(st) != 1 || st[0].Name != "dev" || st[0].ResourceClaimName == nil {
		t.Fatalf("pod %s status.resourceClaimStatuses %+v: want one for claim dev with its generated name", name, st)
	}
	c, err := e.client.ResourceV1().ResourceClaims("default").Get(ctx, *st[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 || c.Status.Allocation.Devices.Results[0].Pool != testNode {
		t.Fatalf("claim %s of pod %s: allocation %+v, want one device of pool %s", c.Name, name, c.Status.Allocation, testNode)
	}
	return c
}

// waitCalls polls the driver's call log until cond holds.
func waitCalls(t *testing.T, drv *dratest.Process, timeout time.Duration, what string, cond func([]dratest.Call) bool) []dratest.Call {
	t.Helper()
	var calls []dratest.Call
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		var err error
		calls, err = drv.Calls()
		return err == nil && cond(calls), nil
	})
	if err != nil {
		t.Fatalf("driver calls: %s not seen within %v; calls %+v", what, timeout, calls)
	}
	return calls
}

// checkPodResourcesClaim checks that the podresources API (Get) reports
// the pod's container with the claim's device and CDI device ID.
func checkPodResourcesClaim(t *testing.T, e *procEnv, pod string, claim *resourceapi.ResourceClaim) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(e.root, "pod-resources", "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	want := claim.Status.Allocation.Devices.Results[0]
	wantCDI := "dra.nodekit.test/device=claim-" + string(claim.UID)
	var last string
	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: pod, PodNamespace: "default"})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = r.String()
		for _, c := range r.PodResources.GetContainers() {
			for _, d := range c.DynamicResources {
				if d.ClaimName != claim.Name || d.ClaimNamespace != "default" || len(d.ClaimResources) != 1 {
					continue
				}
				cr := d.ClaimResources[0]
				if cr.DriverName == draTestDriver && cr.PoolName == want.Pool && cr.DeviceName == want.Device &&
					len(cr.CdiDevices) == 1 && cr.CdiDevices[0].Name == wantCDI {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("podresources Get %s: no claim %s with device %s/%s and CDI %s; last %s", pod, claim.Name, want.Pool, want.Device, wantCDI, last)
	}
}
