package syncloop_test

import (
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/internal/scenario"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of testdata/*.txt scenarios")

// TestScenarios runs the scripted scenarios of testdata/*.txt on a stepped
// SimNode: the real loop, PLEG and status manager on a fake clock, every
// step on the test's goroutine (no sleeps, no goroutines). The commands:
//
//	node resize cpu=Q memory=Q        (first command only) a node with in-place
//	                                  resize and that allocatable (scenario_resize_test.go)
//	pod name=N [restart=Always|OnFailure|Never] [init=(a,b)] [containers=(c)] [grace=S] [static]
//	    [sidecars=(b)]              those init containers are sidecars (restartPolicy Always)
//	    [restartall=(c:42)]         c gets a RestartAllContainers rule for exit code 42
//	                                (and restartPolicy Never unless it is a sidecar)
//	    [res=(c:CPU:MEM)]           c requests and is limited to CPU and MEM
//	    [restart-on=(c:memory)]     c's resizePolicy restarts it for a memory resize
//	resize pod=N res=(c:CPU:MEM)      the API server's resize: c's new resources, next generation
//	resize-status pod=N               the resize conditions and each container's resources
//	resized pod=N container=C         the runtime's in-place resizes of the container
//	events pod=N                      the events recorded on the pod
//	exit pod=N container=C code=K     the runtime's container exits
//	step                              one round at the current time
//	advance d=DURATION                time passes, a round each second
//	status pod=N [uid=U]              the pod's status as the node holds it
//	                                  (uid: an older pod of that name)
//	published pod=N                   phases published, and to which object
//	delete pod=N                      graceful deletion by the API server
//	remove-static pod=N               the static pod's manifest is removed
//	mirror pod=N                      the simulated API server's mirror pod
//	hold-mirrors, release-mirrors     delay the API server's watch of mirrors
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata: %v", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			s := &scenarioNode{t: t, pods: map[string]*v1.Pod{}}
			scenario.Run(t, path, *rewrite, s.do)
		})
	}
}

// scenarioNode is a stepped SimNode and the pods a scenario made. The
// node is started by the first command: a "node" command's options, else
// the defaults.
type scenarioNode struct {
	t    *testing.T
	n    *agenttest.SimNode
	pods map[string]*v1.Pod
}

// startNode starts the stepped SimNode with opts on the scenario clock.
func (s *scenarioNode) startNode(opts agenttest.SimOptions) {
	opts.Clock = testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s.n = agenttest.StartSimNode(s.t, opts)
}

func (s *scenarioNode) do(c *scenario.Command) string {
	ctx := klog.NewContext(s.t.Context(), ktesting.NewLogger(s.t, ktesting.NewConfig(ktesting.Verbosity(2))))
	if c.Name == "node" {
		if s.n != nil {
			s.t.Fatalf("%s: node must be the first command", c.Pos)
		}
		s.startNode(nodeOptions(s.t, c))
		return ""
	}
	if s.n == nil {
		s.startNode(agenttest.SimOptions{})
	}
	if out, ok := s.doResize(c); ok {
		return out
	}
	switch c.Name {
	case "pod":
		return s.addPod(c)
	case "exit":
		p := s.pod(c)
		name, _ := c.Arg("container")
		code, _ := c.Arg("code")
		k, err := strconv.Atoi(code)
		if err != nil {
			s.t.Fatalf("%s: code=%q: %v", c.Pos, code, err)
		}
		if err := s.n.Runtime().ExitContainer(p.UID, name, k); err != nil {
			return "error: " + err.Error()
		}
		return ""
	case "step":
		return errString(s.n.Step(ctx))
	case "advance":
		v, _ := c.Arg("d")
		d, err := time.ParseDuration(v)
		if err != nil {
			s.t.Fatalf("%s: d=%q: %v", c.Pos, v, err)
		}
		return errString(s.n.Advance(ctx, d))
	case "status":
		if uid, ok := c.Arg("uid"); ok {
			return s.status(types.UID(uid))
		}
		return s.status(s.pod(c).UID)
	case "published":
		return s.published(s.pod(c))
	case "delete":
		s.n.DeletePod(s.pod(c))
		return ""
	case "remove-static":
		s.n.RemoveStaticPod(s.pod(c))
		return ""
	case "hold-mirrors":
		s.n.HoldMirrors(true)
		return ""
	case "release-mirrors":
		s.n.HoldMirrors(false)
		return ""
	case "mirror":
		p := s.pod(c)
		m, ok := s.n.Mirror(p.Name, p.Namespace)
		if !ok {
			return "no mirror pod"
		}
		return fmt.Sprintf("mirror %s of %s", m.UID, m.Annotations["kubernetes.io/config.mirror"])
	}
	s.t.Fatalf("%s: unknown command %q", c.Pos, c.Name)
	return ""
}

func errString(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

func (s *scenarioNode) pod(c *scenario.Command) *v1.Pod {
	name, _ := c.Arg("pod")
	p, ok := s.pods[name]
	if !ok {
		s.t.Fatalf("%s: no pod %q", c.Pos, name)
	}
	return p
}

// addPod builds a pod from the command and sends it; uid is NAME-vN, N
// counting the pods of that name.
func (s *scenarioNode) addPod(c *scenario.Command) string {
	name, _ := c.Arg("name")
	version := 1
	if old, ok := s.pods[name]; ok {
		version, _ = strconv.Atoi(strings.TrimPrefix(string(old.UID), name+"-v"))
		version++
	}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "default", UID: types.UID(fmt.Sprintf("%s-v%d", name, version)),
		CreationTimestamp: metav1.NewTime(s.n.Now()), Generation: 1,
	}}
	restart, _ := c.Arg("restart")
	p.Spec.RestartPolicy = v1.RestartPolicy(restart)
	if p.Spec.RestartPolicy == "" {
		p.Spec.RestartPolicy = v1.RestartPolicyAlways
	}
	for _, n := range c.Vals("init") {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: "busybox"})
	}
	containers := c.Vals("containers")
	if len(containers) == 0 {
		containers = []string{"app"}
	}
	for _, n := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: "busybox"})
	}
	setRestartRules(s.t, c, &p.Spec)
	setResources(s.t, c, &p.Spec)
	if g, ok := c.Arg("grace"); ok {
		v, err := strconv.ParseInt(g, 10, 64)
		if err != nil {
			s.t.Fatalf("%s: grace=%q: %v", c.Pos, g, err)
		}
		p.Spec.TerminationGracePeriodSeconds = &v
	}
	s.pods[name] = p
	if c.Has("static") {
		s.n.AddStaticPod(p)
	} else {
		s.n.AddPod(p)
	}
	return ""
}

// setRestartRules applies the sidecars= and restartall= arguments.
func setRestartRules(t *testing.T, c *scenario.Command, spec *v1.PodSpec) {
	find := func(name string) *v1.Container {
		for _, list := range [][]v1.Container{spec.InitContainers, spec.Containers} {
			for i := range list {
				if list[i].Name == name {
					return &list[i]
				}
			}
		}
		t.Fatalf("%s: no container %q", c.Pos, name)
		return nil
	}
	always, never := v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyNever
	for _, n := range c.Vals("sidecars") {
		find(n).RestartPolicy = &always
	}
	for _, v := range c.Vals("restartall") {
		name, code, ok := strings.Cut(v, ":")
		k, err := strconv.ParseInt(code, 10, 32)
		if !ok || err != nil {
			t.Fatalf("%s: restartall=%q: want NAME:CODE", c.Pos, v)
		}
		ct := find(name)
		if ct.RestartPolicy == nil {
			ct.RestartPolicy = &never
		}
		ct.RestartPolicyRules = append(ct.RestartPolicyRules, v1.ContainerRestartRule{
			Action:    v1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{int32(k)}},
		})
	}
}

// status prints the pod's phase and each container's state, one line each.
func (s *scenarioNode) status(uid types.UID) string {
	st, ok := s.n.Status(uid)
	if !ok {
		return "no status"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s", st.Phase)
	if st.Reason != "" {
		fmt.Fprintf(&b, " reason=%s", st.Reason)
	}
	for _, cond := range st.Conditions {
		switch cond.Type {
		case v1.PodReady, v1.PodInitialized:
			fmt.Fprintf(&b, " %s=%s", cond.Type, cond.Status)
		case v1.AllContainersRestarting:
			fmt.Fprintf(&b, " %s=%s", cond.Type, cond.Status)
			if cond.Reason != "" {
				fmt.Fprintf(&b, "(%s)", cond.Reason)
			}
		}
	}
	for _, cs := range st.InitContainerStatuses {
		b.WriteString("\ninit " + containerLine(cs))
	}
	for _, cs := range st.ContainerStatuses {
		b.WriteString("\n" + containerLine(cs))
	}
	return b.String()
}

func containerLine(cs v1.ContainerStatus) string {
	line := cs.Name + ": " + stateString(cs.State)
	line += fmt.Sprintf(" ready=%v restarts=%d", cs.Ready, cs.RestartCount)
	if t := cs.LastTerminationState.Terminated; t != nil {
		line += fmt.Sprintf(" last=%s(%d)", t.Reason, t.ExitCode)
	}
	return line
}

func stateString(s v1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated %s(%d)", s.Terminated.Reason, s.Terminated.ExitCode)
	case s.Waiting != nil:
		out := "waiting " + s.Waiting.Reason
		if s.Waiting.Message != "" {
			out += ": " + s.Waiting.Message
		}
		return out
	}
	return "unknown"
}

// published prints the phases the sink accepted (repeats collapsed) and
// whether the pod was deleted.
func (s *scenarioNode) published(p *v1.Pod) string {
	var phases []string
	for _, st := range s.n.Published(p.UID) {
		if ph := string(st.Phase); len(phases) == 0 || phases[len(phases)-1] != ph {
			phases = append(phases, ph)
		}
	}
	if m, ok := s.n.Mirror(p.Name, p.Namespace); ok {
		for _, st := range s.n.Published(m.UID) {
			if ph := "mirror:" + string(st.Phase); len(phases) == 0 || phases[len(phases)-1] != ph {
				phases = append(phases, ph)
			}
		}
	}
	out := "published " + strings.Join(phases, " ")
	if len(phases) == 0 {
		out = "published nothing"
	}
	if s.n.Deleted(p.UID) {
		out += "\ndeleted"
	}
	return out
}
