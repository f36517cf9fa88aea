package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/internal/fsutil"
	"github.com/nodekit/nodekit/internal/kubeletconf"
	"github.com/nodekit/nodekit/internal/localcp"
)

// The takeover test hands one node from the upstream kubelet v1.37.2 to
// fullagent and back, with pods running: same root dir, node name, client
// certificate, containerd and cgroup root. Neither agent may restart a
// container the other made.

// takeoverSync is both agents' syncFrequency; the new agent is watched for
// several of them before the test compares.
const (
	takeoverSync    = 5 * time.Second
	takeoverObserve = 4 * takeoverSync
	staticPodName   = "static-" + testNode // the mirror pod of the manifest
)

// takeoverEnv is a control plane, a containerd and the two agents, sharing
// one root dir.
type takeoverEnv struct {
	client    kubernetes.Interface
	rt        *criruntime.Runtime // the test's own CRI client
	manifests string
	root      string
	kubelet   *agentProcess
	fullagent *agentProcess
	// csi is the CSI driver of the with-claim pod's volume, registered
	// with whichever agent runs (ROOT/plugins_registry).
	csi *csitest.Process
}

// findKubelet returns the upstream kubelet in the bin dir of the other
// upstream binaries (hack/build-tools.sh builds it).
func findKubelet(t *testing.T) string {
	t.Helper()
	dir, err := localcp.FindBinDir()
	if err != nil {
		agenttest.RequireIntegration(t, "upstream kubelet", err)
	}
	bin := filepath.Join(dir, "kubelet")
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		agenttest.RequireIntegration(t, "upstream kubelet", fmt.Errorf("%s missing: run bash hack/build-tools.sh kubelet", bin))
	}
	return bin
}

func startTakeoverEnv(t *testing.T) *takeoverEnv {
	t.Helper()
	agenttest.SkipShort(t, "kubelet and fullagent as processes")
	kubeletBin := findKubelet(t)
	cp := agenttest.StartControlPlane(t)
	cri := agenttest.StartContainerd(t)
	cp.SeedNamespace(t, "default")
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	t.Cleanup(func() {
		if _, err := fsutil.UnmountBelow(root); err != nil {
			t.Errorf("unmount the agents' volumes: %v", err)
		}
	})
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	gw := cri.Gateway.String()
	// What both agents read. The node API listens on the test's bridge
	// address, not on :10250 of every interface, and healthz there too, not
	// on 127.0.0.1:10248.
	common := kubeletconf.Common(kubeletconf.Node{
		PodLogsDir: filepath.Join(dir, "logs"), RuntimeEndpoint: cri.Endpoint, Address: gw,
		CgroupRoot: agenttest.CgroupRoot(t), ClientCAFile: cp.CAFile, HealthzAddress: gw,
		Extra: fmt.Sprintf("staticPodPath: %s\nsyncFrequency: %s\nfileCheckFrequency: 2s\nclusterDNS: [10.96.0.10]\n", manifests, takeoverSync),
	})
	writeFile(t, filepath.Join(dir, "fullagent.yaml"), common)
	writeFile(t, filepath.Join(dir, "kubelet.yaml"), common+kubeletconf.KubeletOnly(""))
	args := func(config string) []string {
		return append(kubeletconf.Args(cp.NodeKubeconfig(testNode), filepath.Join(dir, config), testNode, gw, root), "-v=2")
	}
	rt, err := criruntime.New(t.Context(), criruntime.Config{Endpoint: cri.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return &takeoverEnv{
		client: cp.AdminClient(), rt: rt, manifests: manifests, root: root,
		kubelet:   newAgentProcess(t, kubeletBin, filepath.Join(dir, "kubelet.log"), args("kubelet.yaml")),
		fullagent: newAgentProcess(t, buildAgent(t), filepath.Join(dir, "fullagent.log"), args("fullagent.yaml")),
	}
}

// takeoverPods are the workload: a plain pod (with the default
// service-account token volume), one with an init container, one whose
// container exited once (restart count 1), one with a configMap volume.
// The static pod comes from a manifest.
func takeoverPods() []*v1.Pod {
	plain := simplePod("plain", v1.RestartPolicyAlways, "sleep 3600")
	withInit := simplePod("with-init", v1.RestartPolicyAlways, "cat /work/ready && sleep 3600")
	withInit.Spec.InitContainers = []v1.Container{{Name: "setup", Command: []string{"sh", "-c", "echo done > /work/ready"},
		VolumeMounts: []v1.VolumeMount{{Name: "work", MountPath: "/work"}}}}
	withInit.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "work", MountPath: "/work"}}
	withInit.Spec.Volumes = []v1.Volume{{Name: "work", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	restarted := simplePod("restarted", v1.RestartPolicyAlways, "if [ -e /data/once ]; then exec sleep 3600; fi; touch /data/once; exit 1")
	restarted.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	restarted.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	withCM := simplePod("with-configmap", v1.RestartPolicyAlways, "sleep 3600")
	withCM.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "cm", MountPath: "/cm"}}
	withCM.Spec.Volumes = []v1.Volume{{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "takeover"}}}}}
	pods := []*v1.Pod{plain, withInit, restarted, withCM}
	for _, p := range pods {
		p.Spec.TerminationGracePeriodSeconds = new(int64)
	}
	return pods
}

const staticManifest = `apiVersion: v1
kind: Pod
metadata:
  name: static
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: app
    image: ` + agenttest.BusyboxImage + `
    command: ["sleep", "3600"]
`

func TestTakeoverKubeletToFullagentAndBack(t *testing.T) {
	e := startTakeoverEnv(t)
	ctx := t.Context()
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "takeover"}, Data: map[string]string{"greeting": "hello"}}
	if _, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(e.manifests, "static.yaml"), staticManifest)

	start := time.Now()
	e.kubelet.start()
	apiEnv := &env{client: e.client, rootDir: e.root}
	e.csi = startTakeoverCSI(t, apiEnv)
	for _, p := range append(takeoverPods(), claimPod(), blockPod()) {
		apiEnv.createPod(t, p)
	}
	names := []string{"plain", "with-init", "restarted", "with-configmap", "with-claim", "with-block", staticPodName}
	for _, name := range names {
		apiEnv.waitPod(t, name, 3*time.Minute, "Ready under kubelet", podReady)
	}
	apiEnv.waitPod(t, "restarted", time.Minute, "restart count 1", func(p *v1.Pod) bool {
		c := containerStatus(p, "app")
		return podReady(p) && c != nil && c.RestartCount == 1
	})
	t.Logf("kubelet ran the %d pods Ready in %v", len(names), time.Since(start).Round(time.Second))
	e.checkHashes(t, names[:len(names)-1])
	withBlock := e.pod(t, "with-block")
	e.detachBlockLoopsOnCleanup(t, withBlock.UID)
	e.checkBlockVolume(t, "under kubelet", withBlock, 0, takeoverBlockMapCalls)

	e.handOver(t, "kubelet", e.kubelet, "fullagent", e.fullagent, names)
	e.handOver(t, "fullagent", e.fullagent, "kubelet", e.kubelet, names)
	// kubelet tears down the block volume fullagent mapped again.
	e.deleteBlockPod(t, withBlock.UID)
}

// handOver stops from (SIGTERM), starts to on the same node, waits until
// to has synced for several sync periods, and checks that no container
// was restarted and that the pods' statuses in the API did not change.
func (e *takeoverEnv) handOver(t *testing.T, fromName string, from *agentProcess, toName string, to *agentProcess, names []string) {
	t.Helper()
	criBefore, apiBefore := e.criSnapshot(t), e.apiSnapshot(t, names)
	callsBefore := e.callCount(t)
	from.signal(syscall.SIGTERM)
	select {
	case <-from.done:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not exit within a minute of SIGTERM", fromName)
	}
	started := time.Now()
	to.start()
	e.waitLeaseRenewedAfter(t, started, 2*time.Minute, toName)
	synced := time.Since(started)
	// Watch for several sync periods: every pod must stay Ready.
	deadline := time.Now().Add(takeoverObserve)
	for time.Now().Before(deadline) {
		for _, name := range names {
			p, err := e.client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
			if err == nil && !podReady(p) {
				t.Logf("%s -> %s: pod %s not Ready at %v: %s", fromName, toName, name, time.Since(started).Round(time.Second), describeStatus(p))
			}
		}
		time.Sleep(time.Second)
	}
	// The static pod may be on its way back (see below).
	(&env{client: e.client}).waitPod(t, staticPodName, 2*time.Minute, "Ready under "+toName, podReady)
	criAfter, apiAfter := e.criSnapshot(t), e.apiSnapshot(t, names)
	staticUID := apiBefore[staticPodName].uid

	// The pods from the API: nothing restarted, nothing new, same status.
	kept, restarted, added := compareCRI(criBefore, criAfter, func(c criContainer) bool { return c.podName == staticPodName })
	t.Logf("%s -> %s: %s synced (Lease renewed) %v after start; API pods: %d containers and sandboxes before, %d kept, %d gone or restarted, %d new",
		fromName, toName, toName, synced.Round(100*time.Millisecond), kept+len(restarted), kept, len(restarted), len(added))
	for _, c := range restarted {
		t.Errorf("%s -> %s: %s was restarted or removed", fromName, toName, c)
	}
	for _, c := range added {
		t.Errorf("%s -> %s: new %s", fromName, toName, c)
	}
	for _, name := range names[:len(names)-1] {
		if d := apiBefore[name].diff(apiAfter[name]); d != "" {
			t.Errorf("%s -> %s: pod %s status changed: %s", fromName, toName, name, d)
		}
		// The rest of the status (conditions' times, fields one agent
		// reports and the other not) is logged: a difference of the agents.
		if d := flatDiff(apiBefore[name].status, apiAfter[name].status); d != "" {
			t.Logf("%s -> %s: pod %s status fields that differ: %s", fromName, toName, name, d)
		}
	}
	e.checkVolumes(t, fmt.Sprintf("%s -> %s", fromName, toName))
	e.checkClaimVolume(t, fmt.Sprintf("%s -> %s", fromName, toName), apiAfter["with-claim"].uid)
	e.checkBlockVolume(t, fmt.Sprintf("%s -> %s", fromName, toName), e.pod(t, "with-block"), callsBefore, takeoverBlockMapCalls)
	if stacked := stackedMounts(t, e.root); len(stacked) > 0 {
		// A volume mounted again over itself: the containers keep the old
		// mount and never see the agent's updates (token refreshes).
		t.Errorf("%s -> %s: mounted more than once below the root dir: %v", fromName, toName, stacked)
	}

	// The static pod: its UID is the agent's hash of the manifest, which
	// differs between the two agents, so the new agent sees the old pod as
	// another one (see the report in README).
	sKept, sRestarted, sAdded := compareCRI(criBefore, criAfter, func(c criContainer) bool { return c.podName != staticPodName })
	after := apiAfter[staticPodName]
	t.Logf("%s -> %s: static pod: UID %s -> %s; %d containers/sandboxes kept, %d stopped, %d new; Ready=%v",
		fromName, toName, staticUID, after.uid, sKept, len(sRestarted), len(sAdded), after.ready)
	if !after.ready {
		t.Errorf("%s -> %s: static pod %s not Ready under %s", fromName, toName, staticPodName, toName)
	}
}

// waitLeaseRenewedAfter waits until the node's Lease was renewed after t0:
// the new agent is up, registered and talking to the API server.
func (e *takeoverEnv) waitLeaseRenewedAfter(t *testing.T, t0 time.Time, timeout time.Duration, who string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := e.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, testNode, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, nil
		}
		return l.Spec.RenewTime.After(t0.Truncate(time.Microsecond)), nil
	})
	if err != nil {
		t.Fatalf("%s did not renew the node Lease within %v", who, timeout)
	}
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// criContainer is a container or sandbox as the runtime reports it.
type criContainer struct {
	id, podName, name string // name "" for a sandbox
	podUID            types.UID
	state             nodekit.State
	started           time.Time
	restarts          int
}

func (c criContainer) String() string {
	what := "container " + c.name
	if c.name == "" {
		what = "sandbox"
	}
	return fmt.Sprintf("%s %.12s of pod %s (%s, started %s, restart count %d)", what, c.id, c.podName, c.state, c.started.Format(time.RFC3339Nano), c.restarts)
}

// criSnapshot lists every container and sandbox in the runtime, in any
// state, by ID.
func (e *takeoverEnv) criSnapshot(t *testing.T) map[string]criContainer {
	t.Helper()
	pods, err := e.rt.ListPods(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]criContainer{}
	for _, p := range pods {
		st, err := e.rt.GetPodStatus(t.Context(), p.ID, p.Name, p.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range st.Sandboxes {
			state := nodekit.StateExited
			if sb.State == nodekit.SandboxReady {
				state = nodekit.StateRunning
			}
			out[sb.ID] = criContainer{id: sb.ID, podName: p.Name, podUID: p.ID, state: state, started: sb.CreatedAt}
		}
		for _, c := range st.Containers {
			out[c.ID.ID] = criContainer{id: c.ID.ID, podName: p.Name, podUID: p.ID, name: c.Name, state: c.State, started: c.StartedAt, restarts: c.RestartCount}
		}
	}
	return out
}

// compareCRI counts what was kept as it was (same ID, state and start
// time), and lists what is gone or changed and what is new; skip leaves
// containers out.
func compareCRI(before, after map[string]criContainer, skip func(criContainer) bool) (kept int, changed, added []criContainer) {
	for id, b := range before {
		if skip(b) {
			continue
		}
		a, ok := after[id]
		if ok && a.state == b.state && a.started.Equal(b.started) && a.restarts == b.restarts {
			kept++
			continue
		}
		changed = append(changed, b)
	}
	for id, a := range after {
		if _, ok := before[id]; !ok && !skip(a) {
			added = append(added, a)
		}
	}
	return kept, changed, added
}

// apiPod is what the test compares of a pod's status in the API.
type apiPod struct {
	status     map[string]string // every field of the status, flattened (logged, not compared)
	uid        types.UID
	ready      bool
	phase      v1.PodPhase
	podIP      string
	containers map[string]string // name -> ID, restarts, readiness, state
}

func (a apiPod) diff(b apiPod) string {
	var d []string
	if a.uid != b.uid || a.phase != b.phase || a.podIP != b.podIP || a.ready != b.ready {
		d = append(d, fmt.Sprintf("uid/phase/IP/ready %s/%s/%s/%v -> %s/%s/%s/%v", a.uid, a.phase, a.podIP, a.ready, b.uid, b.phase, b.podIP, b.ready))
	}
	for name, s := range a.containers {
		if b.containers[name] != s {
			d = append(d, fmt.Sprintf("%s: {%s} -> {%s}", name, s, b.containers[name]))
		}
	}
	sort.Strings(d)
	return strings.Join(d, "; ")
}

func (e *takeoverEnv) apiSnapshot(t *testing.T, names []string) map[string]apiPod {
	t.Helper()
	out := map[string]apiPod{}
	for _, name := range names {
		p, err := e.client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a := apiPod{status: flatten(t, p.Status), uid: p.UID, ready: podReady(p), phase: p.Status.Phase, podIP: p.Status.PodIP, containers: map[string]string{}}
		if uid := p.Annotations["kubernetes.io/config.mirror"]; uid != "" {
			a.uid = types.UID(uid) // a mirror pod: the static pod's UID
		}
		for _, list := range [][]v1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
			for _, c := range list {
				state := "waiting"
				switch {
				case c.State.Running != nil:
					state = "running since " + c.State.Running.StartedAt.UTC().Format(time.RFC3339)
				case c.State.Terminated != nil:
					state = fmt.Sprintf("terminated %s exit %d", c.State.Terminated.Reason, c.State.Terminated.ExitCode)
				}
				a.containers[c.Name] = fmt.Sprintf("id=%.12s restarts=%d ready=%v %s", strings.TrimPrefix(c.ContainerID, "containerd://"), c.RestartCount, c.Ready, state)
			}
		}
		out[name] = a
	}
	return out
}

// checkVolumes reads the volumes of the running containers: the configMap's
// file, the init container's file in the emptyDir and the service-account
// token, which a new agent must not have clobbered.
func (e *takeoverEnv) checkVolumes(t *testing.T, when string) {
	t.Helper()
	for _, check := range []struct{ pod, path, want string }{
		{"with-configmap", "/cm/greeting", "hello"},
		{"with-init", "/work/ready", "done\n"},
		{"plain", "/var/run/secrets/kubernetes.io/serviceaccount/namespace", "default"},
		{"with-claim", "/data/f", "kept\n"},
	} {
		p, err := e.client.CoreV1().Pods("default").Get(t.Context(), check.pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		id := containerIDOf(p, "app")
		out, stderr, code, err := e.rt.ExecSync(t.Context(), nodekit.ContainerID{ID: id}, []string{"cat", check.path}, 10*time.Second)
		if err != nil || code != 0 || string(out) != check.want {
			t.Errorf("%s: cat %s in %s: %q (code %d, %v, %s), want %q", when, check.path, check.pod, out, code, err, stderr, check.want)
		}
	}
}

// stackedMounts lists the mount points at or below dir that are mounted
// more than once.
func stackedMounts(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			seen[f[4]]++
		}
	}
	var out []string
	for mp, n := range seen {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s (%d times)", mp, n))
		}
	}
	sort.Strings(out)
	return out
}

// flatten turns v's JSON into path -> value.
func flatten(t *testing.T, v any) map[string]string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(prefix+"."+k, x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", prefix, i), x)
			}
		default:
			out[prefix] = fmt.Sprint(v)
		}
	}
	walk("status", tree)
	return out
}

// flatDiff lists the paths whose values differ between two flattened
// objects.
func flatDiff(a, b map[string]string) string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, fmt.Sprintf("%s=%q -> absent", k, v))
		} else if w != v {
			d = append(d, fmt.Sprintf("%s=%q -> %q", k, v, w))
		}
	}
	for k, w := range b {
		if _, ok := a[k]; !ok {
			d = append(d, fmt.Sprintf("%s absent -> %q", k, w))
		}
	}
	sort.Strings(d)
	return strings.Join(d, "; ")
}

// checkHashes compares the container hash the runtime holds (written by
// the agent that made the container) with criruntime's hash of the spec.
func (e *takeoverEnv) checkHashes(t *testing.T, names []string) {
	t.Helper()
	for _, name := range names {
		p, err := e.client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := e.rt.GetPodStatus(t.Context(), p.UID, p.Name, p.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		spec := map[string]*v1.Container{}
		for _, list := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for i := range list {
				spec[list[i].Name] = &list[i]
			}
		}
		for _, cs := range st.Containers {
			c := spec[cs.Name]
			switch {
			case c == nil:
				t.Errorf("pod %s: the runtime has a container %s the spec does not", name, cs.Name)
			case cs.Hash != criruntime.HashContainer(c):
				t.Errorf("pod %s container %s: the runtime holds hash %x, criruntime hashes the spec to %x", name, cs.Name, cs.Hash, criruntime.HashContainer(c))
			default:
				t.Logf("pod %s container %s (%.12s): hash %x as criruntime computes it", name, cs.Name, cs.ID.ID, cs.Hash)
			}
		}
	}
}
