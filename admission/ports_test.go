package admission_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission/admissiontest"
)

// withPort adds a host port to the pod's first container; ip and proto may
// be empty.
func withPort(ip, proto string, port int32) func(*v1.Pod) {
	return func(p *v1.Pod) {
		c := &p.Spec.Containers[0]
		c.Ports = append(c.Ports, v1.ContainerPort{ContainerPort: 80, HostPort: port, HostIP: ip, Protocol: v1.Protocol(proto)})
	}
}

func TestNodePorts(t *testing.T) {
	running := func(edits ...func(*v1.Pod)) admissiontest.Node {
		return admissiontest.Node{Pods: []*v1.Pod{pod("running", "", edits...)}}
	}
	conflict := reject("NodePorts", msgPorts)
	initWithPort := func(restartable bool) func(*v1.Pod) {
		return func(p *v1.Pod) {
			c := container("init", "")
			if restartable {
				c = sidecar("init", "")
			}
			c.Ports = []v1.ContainerPort{{ContainerPort: 9090, HostPort: 9090}}
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		}
	}
	runDecisionCases(t, []decisionCase{
		{name: "no host ports", node: running(withPort("", "", 8080)), pod: pod("p", ""), want: nodekit.Admitted},
		{name: "free port", node: running(withPort("", "", 8080)), pod: pod("p", "", withPort("", "", 8081)), want: nodekit.Admitted},
		{name: "same port, defaults", node: running(withPort("", "", 8080)), pod: pod("p", "", withPort("", "", 8080)), want: conflict},
		{name: "empty protocol is TCP", node: running(withPort("", "TCP", 8080)), pod: pod("p", "", withPort("", "", 8080)), want: conflict},
		{name: "empty IP is 0.0.0.0", node: running(withPort("0.0.0.0", "", 8080)), pod: pod("p", "", withPort("", "", 8080)), want: conflict},
		{name: "other protocol", node: running(withPort("", "TCP", 53)), pod: pod("p", "", withPort("", "UDP", 53)), want: nodekit.Admitted},
		{name: "different specific IPs", node: running(withPort("10.0.0.1", "", 8080)), pod: pod("p", "", withPort("10.0.0.2", "", 8080)), want: nodekit.Admitted},
		{name: "same specific IP", node: running(withPort("10.0.0.1", "", 8080)), pod: pod("p", "", withPort("10.0.0.1", "", 8080)), want: conflict},
		{name: "wildcard wanted, specific taken", node: running(withPort("10.0.0.1", "", 8080)), pod: pod("p", "", withPort("", "", 8080)), want: conflict},
		{name: "specific wanted, wildcard taken", node: running(withPort("", "", 8080)), pod: pod("p", "", withPort("10.0.0.1", "", 8080)), want: conflict},
		{name: "wildcard taken on other protocol", node: running(withPort("", "UDP", 8080)), pod: pod("p", "", withPort("10.0.0.1", "TCP", 8080)), want: nodekit.Admitted},
		{name: "container port without host port", node: running(withPort("", "", 0)), pod: pod("p", "", withPort("", "", 0)), want: nodekit.Admitted},
		{name: "terminal pod frees its ports", node: running(withPort("", "", 8080), withPhase(v1.PodFailed)), pod: pod("p", "", withPort("", "", 8080)), want: nodekit.Admitted},
		{name: "the pod itself does not conflict", node: admissiontest.Node{Pods: []*v1.Pod{pod("p", "", withPort("", "", 8080))}}, pod: pod("p", "", withPort("", "", 8080)), want: nodekit.Admitted},
		{name: "sidecar port of a running pod is taken", node: running(initWithPort(true)), pod: pod("p", "", withPort("", "", 9090)), want: conflict},
		{name: "init container port of a running pod is not", node: running(initWithPort(false)), pod: pod("p", "", withPort("", "", 9090)), want: nodekit.Admitted},
		{name: "sidecar port of the new pod is checked", node: running(withPort("", "", 9090)), pod: pod("p", "", initWithPort(true)), want: conflict},
		{name: "init container port of the new pod is not", node: running(withPort("", "", 9090)), pod: pod("p", "", initWithPort(false)), want: nodekit.Admitted},
	})
}
