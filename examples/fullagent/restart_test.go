package main

import (
	"context"
	"os"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/fsutil"
	"github.com/nodekit/nodekit/podconfig"
)

// Restarts, outages and reboots, with fullagent as a child process
// (procEnv, procenv_test.go).

// The agent killed with SIGKILL and started again adopts every container:
// same IDs, same restart counts, no new container; probes resume; a
// finished pod is not run again; a pod deleted while the agent was down is
// cleaned up, once, after the sources have been seen.
func TestAgentRestartAdoptsContainers(t *testing.T) {
	e := startProcEnv(t)
	e.createPod(t, steadyPod("steady"))
	restarted := simplePod("restarted", v1.RestartPolicyAlways, "touch /tmp/ready; sleep 3600; exit 1")
	restarted.Spec.Containers[0].ReadinessProbe = readyProbe()
	e.createPod(t, restarted)
	e.createPod(t, simplePod("done", v1.RestartPolicyNever, "echo done"))
	orphan := simplePod("orphan", v1.RestartPolicyAlways, "sleep 3600")
	orphan.Spec.TerminationGracePeriodSeconds = new(int64)
	e.createPod(t, orphan)

	e.waitPod(t, "steady", 90*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
	p := e.waitPod(t, "restarted", 60*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
	// One restart before the agent's: kill the sleep, sh exits 1.
	e.execIn(t, containerIDOf(p, "app"), "killall", "sleep")
	e.waitPod(t, "restarted", 60*time.Second, "restarted once and Ready", func(p *v1.Pod) bool {
		c := containerStatus(p, "app")
		return c.RestartCount == 1 && c.Ready
	})
	e.waitPod(t, "done", 60*time.Second, "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	orphanPod := e.waitPod(t, "orphan", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	before := map[string]*v1.Pod{}
	counts := map[string]int{}
	for _, name := range []string{"steady", "restarted", "done"} {
		before[name] = e.getPod(t, name)
		counts[name] = len(e.runtimePod(t, before[name].UID).Containers)
	}

	e.agent.kill()
	// While the agent is down: a pod is force-deleted, another is created.
	zero := int64(0)
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := e.client.CoreV1().Pods("default").Delete(ctx, "orphan", metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("force-delete orphan: %v; retrying", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatal("could not force-delete the orphan pod")
	}
	e.createPod(t, simplePod("newcomer", v1.RestartPolicyAlways, "sleep 3600"))
	if len(running(e.runtimePod(t, orphanPod.UID))) != 1 {
		t.Fatal("the orphan's container stopped while no agent ran")
	}
	restartAt := time.Now()
	e.agent.start()

	e.waitPod(t, "newcomer", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	e.waitRuntime(t, orphanPod.UID, 60*time.Second, "the orphan's containers stopped", func(p *nodekit.Pod) bool { return len(running(p)) == 0 })
	t.Logf("newcomer running and orphan stopped %v after the restart", time.Since(restartAt).Round(time.Millisecond))

	// Probes resumed: readiness follows the file again.
	for _, name := range []string{"steady", "restarted"} {
		e.waitPod(t, name, 30*time.Second, "Ready after the restart", func(p *v1.Pod) bool { return ready(p, "app") })
	}
	e.execIn(t, containerIDOf(before["steady"], "app"), "rm", "/tmp/ready")
	e.waitPod(t, "steady", 30*time.Second, "not Ready once its probe fails", func(p *v1.Pod) bool { return !ready(p, "app") })

	for name, old := range before {
		now := e.getPod(t, name)
		oc, nc := containerStatus(old, "app"), containerStatus(now, "app")
		if nc.ContainerID != oc.ContainerID || nc.RestartCount != oc.RestartCount || now.Status.Phase != old.Status.Phase {
			t.Errorf("%s: container %s restarts %d phase %s before, %s restarts %d phase %s after the restart",
				name, oc.ContainerID, oc.RestartCount, old.Status.Phase, nc.ContainerID, nc.RestartCount, now.Status.Phase)
		}
		if n := len(e.runtimePod(t, now.UID).Containers); n != counts[name] {
			t.Errorf("%s: %d containers in the runtime after the restart, %d before", name, n, counts[name])
		}
	}
	// Housekeeping runs every 2 s: give it a few rounds to repeat itself.
	time.Sleep(6 * time.Second)
	if n := countLines(e.agent.logOfRun(), "Killing a pod the agent does not know", string(orphanPod.UID)); n != 1 {
		t.Errorf("the orphan was killed %d times by housekeeping, want once", n)
	}
}

// The API server stops for a minute and comes back on the same port: no
// container is restarted, a container that exited meanwhile is reported,
// restarts per policy went on, and the Lease and node status resume.
func TestAPIServerOutage(t *testing.T) {
	e := startProcEnv(t)
	e.createPod(t, steadyPod("steady"))
	e.createPod(t, simplePod("exiter", v1.RestartPolicyNever, "sleep 20; exit 3"))
	e.createPod(t, simplePod("crasher", v1.RestartPolicyAlways, "sleep 5; exit 1"))
	steady := e.waitPod(t, "steady", 90*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
	exiter := e.waitPod(t, "exiter", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	crasher := e.waitPod(t, "crasher", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	crashesBefore := containerStatus(crasher, "app").RestartCount
	crasherIDs := func() map[string]bool {
		ids := map[string]bool{}
		for _, c := range e.runtimePod(t, crasher.UID).Containers {
			ids[c.ID.ID] = true
		}
		return ids
	}
	idsBefore := crasherIDs()

	down := time.Now()
	e.cp.StopAPIServer()
	e.waitRuntime(t, exiter.UID, 45*time.Second, "the exiter's container exited during the outage", func(p *nodekit.Pod) bool {
		return p != nil && len(p.Containers) == 1 && p.Containers[0].State == nodekit.StateExited
	})
	if wait := time.Minute - time.Since(down); wait > 0 {
		time.Sleep(wait) // the rest of the outage; nothing to wait for
	}
	if got := running(e.runtimePod(t, steady.UID)); got["app"] != containerIDOf(steady, "app") {
		t.Fatalf("steady's container changed during the outage: %v", got)
	}
	startedDuring := 0
	for id := range crasherIDs() {
		if !idsBefore[id] {
			startedDuring++
		}
	}
	up := time.Now()
	e.cp.StartAPIServer()
	t.Logf("API server back after %v", up.Sub(down).Round(time.Second))

	e.waitPod(t, "exiter", 60*time.Second, "Failed with exit code 3", func(p *v1.Pod) bool {
		c := containerStatus(p, "app")
		return p.Status.Phase == v1.PodFailed && c.State.Terminated != nil && c.State.Terminated.ExitCode == 3
	})
	e.waitPod(t, "crasher", 60*time.Second, "restarts of the outage reported", func(p *v1.Pod) bool {
		return containerStatus(p, "app").RestartCount > crashesBefore
	})
	e.leaseRenewedSince(t, up, 60*time.Second)
	e.markNodeUnknownAndWaitReady(t, 60*time.Second)
	t.Logf("statuses, node status and Lease caught up %v after the API server came back", time.Since(up).Round(time.Millisecond))
	t.Logf("crasher started %d new containers during the outage", startedDuring)
	if startedDuring == 0 {
		t.Errorf("crasher (exits every 5s, restartPolicy Always) got no new container during the outage: restarts did not go on offline")
	}

	now := e.getPod(t, "steady")
	if c := containerStatus(now, "app"); c.ContainerID != containerStatus(steady, "app").ContainerID || c.RestartCount != 0 || !c.Ready {
		t.Fatalf("steady after the outage: %+v", c)
	}
	if n := len(e.runtimePod(t, steady.UID).Containers); n != 1 {
		t.Fatalf("steady has %d containers in the runtime, want 1", n)
	}
}

// containerd restarts under the agent, as an upgrade does: the agent
// reconnects, keeps the running containers, and still notices and
// restarts a container that exits afterwards, once.
func TestContainerdRestart(t *testing.T) {
	e := startProcEnv(t)
	e.createPod(t, steadyPod("steady"))
	crashOnce := simplePod("crashonce", v1.RestartPolicyAlways, "sleep 3600; exit 1")
	e.createPod(t, crashOnce)
	steady := e.waitPod(t, "steady", 90*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
	p := e.waitPod(t, "crashonce", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	pid := e.cri.PID()
	restartAt := time.Now()
	e.cri.Restart()
	if e.cri.PID() == pid {
		t.Fatal("containerd has the same pid after Restart")
	}
	// The PLEG sees what happens after the restart.
	e.execIn(t, containerIDOf(p, "app"), "killall", "sleep")
	e.waitPod(t, "crashonce", 60*time.Second, "restarted once", func(p *v1.Pod) bool {
		c := containerStatus(p, "app")
		return c.RestartCount == 1 && c.State.Running != nil
	})
	e.createPod(t, simplePod("after", v1.RestartPolicyAlways, "sleep 3600"))
	e.waitPod(t, "after", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	e.leaseRenewedSince(t, restartAt, 60*time.Second)
	e.markNodeUnknownAndWaitReady(t, 60*time.Second)

	now := e.waitPod(t, "steady", 30*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
	if c := containerStatus(now, "app"); c.ContainerID != containerStatus(steady, "app").ContainerID || c.RestartCount != 0 {
		t.Fatalf("steady after the containerd restart: %+v", c)
	}
	for name, want := range map[string]int{"steady": 1, "crashonce": 2, "after": 1} {
		rp := e.runtimePod(t, e.getPod(t, name).UID)
		if rp == nil {
			t.Errorf("%s: not in the runtime", name)
		} else if len(rp.Containers) != want || len(rp.Sandboxes) != 1 {
			t.Errorf("%s: runtime has %s with %d sandboxes, want %d containers and one sandbox", name, describeRuntime(rp), len(rp.Sandboxes), want)
		}
	}
}

// simulateReboot leaves the node as a host reboot would: no container, no
// sandbox, no mount under the root dir (tmpfs volumes lose their content).
// The agent must not be running.
func (e *procEnv) simulateReboot(t *testing.T) {
	t.Helper()
	if e.agent.running() {
		t.Fatal("simulateReboot with the agent running")
	}
	e.cri.RemoveAllPods()
	if _, err := fsutil.UnmountBelow(e.root); err != nil {
		t.Fatal(err)
	}
	if pods, err := e.rt.ListPods(t.Context(), true); err != nil || len(pods) != 0 {
		t.Fatalf("after the simulated reboot the runtime has %d pods (%v)", len(pods), err)
	}
}

// With --pod-checkpoint, a node rebooted while the API server is
// unreachable runs its pods again from the checkpoint, with their
// ConfigMap-based environment and volumes and their service account token;
// when the API server returns, a pod deleted meanwhile is stopped and the
// others are left alone. A corrupt checkpoint is reported and ignored: the
// agent waits for the API server.
func TestOfflineRestartFromCheckpoint(t *testing.T) {
	e := startProcEnv(t, "--pod-checkpoint")
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "greetings"}, Data: map[string]string{"hello": "hi", "file": "from-volume"}}
	if _, err := e.client.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	envPod := simplePod("envpod", v1.RestartPolicyAlways, "sleep 3600")
	envPod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "GREETING", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "greetings"}, Key: "hello"}}}}
	envPod.Spec.Volumes = []v1.Volume{{Name: "greetings", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "greetings"}}}}}
	envPod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "greetings", MountPath: "/etc/greetings"}}
	names := []string{"envpod", "plain", "doomed"}
	uids := map[string]types.UID{}
	for _, p := range []*v1.Pod{envPod, simplePod("plain", v1.RestartPolicyAlways, "sleep 3600"), simplePod("doomed", v1.RestartPolicyAlways, "sleep 3600")} {
		p.Spec.TerminationGracePeriodSeconds = new(int64) // sleep as PID 1 ignores SIGTERM
		e.createPod(t, p)
	}
	for _, name := range names {
		uids[name] = e.waitPod(t, name, 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning }).UID
	}

	path := checkpointPath(e.root)
	var cp *podconfig.PodCheckpoint
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c, err := podconfig.ReadCheckpoint(path)
		if err != nil {
			return false, nil
		}
		cp = c
		return len(c.Pods) == 3 && len(c.ConfigMaps) >= 1 && len(c.Tokens) >= 3 && c.Node != nil, nil
	})
	if err != nil {
		t.Fatalf("checkpoint %s not complete within 30s: %+v", path, cp)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint file: %v, %v; want mode 0600", fi.Mode(), err)
	}

	// The host reboots while the cloud is unreachable.
	e.cp.StopAPIServer()
	e.agent.kill()
	e.simulateReboot(t)
	offline := time.Now()
	e.agent.start()
	e.agent.waitLog(60*time.Second, "running the pods of the checkpoint")
	ids := map[string]string{}
	for _, name := range names {
		rp := e.waitRuntime(t, uids[name], 90*time.Second, name+" running from the checkpoint", func(p *nodekit.Pod) bool { return running(p)["app"] != "" })
		ids[name] = running(rp)["app"]
	}
	t.Logf("pods running from the checkpoint %v after an offline start", time.Since(offline).Round(time.Millisecond))
	e.execIn(t, ids["envpod"], "sh", "-c", `test "$GREETING" = hi`)
	e.execIn(t, ids["envpod"], "sh", "-c", `test "$(cat /etc/greetings/file)" = from-volume`)
	e.execIn(t, ids["envpod"], "test", "-s", "/var/run/secrets/kubernetes.io/serviceaccount/token")

	// The API server comes back; "doomed" was deleted meanwhile.
	if !e.cp.DeleteFromStorage("pods", "default", "doomed") {
		t.Fatal("pod doomed was not in etcd")
	}
	back := time.Now()
	e.cp.StartAPIServer()
	e.waitRuntime(t, uids["doomed"], 60*time.Second, "doomed stopped", func(p *nodekit.Pod) bool { return len(running(p)) == 0 })
	for _, name := range []string{"envpod", "plain"} {
		e.waitPod(t, name, 60*time.Second, "Running with the container started offline", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodRunning && containerIDOf(p, "app") == ids[name]
		})
		if rp := e.runtimePod(t, uids[name]); len(rp.Containers) != 1 || running(rp)["app"] != ids[name] {
			t.Errorf("%s after the API server came back: %s, want its offline container %s alone", name, describeRuntime(rp), ids[name][:12])
		}
	}
	t.Logf("reconciled %v after the API server came back", time.Since(back).Round(time.Millisecond))
	if c, err := podconfig.ReadCheckpoint(path); err != nil || len(c.Pods) != 2 {
		t.Fatalf("checkpoint after the reconciliation: %v pods, %v", len(c.Pods), err)
	}

	t.Run("corrupt checkpoint is reported and ignored", func(t *testing.T) {
		e.cp.StopAPIServer()
		e.agent.kill()
		e.simulateReboot(t)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)-10] ^= 0x01 // in the payload
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		e.agent.start()
		e.agent.waitLog(30*time.Second, "pod checkpoint is corrupt")
		time.Sleep(podconfig.DefaultCheckpointWait + 5*time.Second) // what the agent would wait before serving it
		if !e.agent.running() {
			t.Fatal("the agent exited over a corrupt checkpoint")
		}
		if pods, err := e.rt.ListPods(t.Context(), true); err != nil || len(pods) != 0 {
			t.Fatalf("pods started from a corrupt checkpoint: %d (%v)", len(pods), err)
		}
		e.cp.StartAPIServer()
		for _, name := range []string{"envpod", "plain"} {
			e.waitRuntime(t, uids[name], 90*time.Second, name+" running once the API server answered", func(p *nodekit.Pod) bool { return running(p)["app"] != "" })
		}
		err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			c, err := podconfig.ReadCheckpoint(path)
			return err == nil && len(c.Pods) == 2, nil
		})
		if err != nil {
			t.Fatal("the corrupt checkpoint was not replaced by a good one")
		}
	})
}
