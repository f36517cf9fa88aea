package admission_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission/admissiontest"
)

var res = admissiontest.Resources

// pod is admissiontest.Pod with the requests given as a string.
func pod(name, requests string, edits ...func(*v1.Pod)) *v1.Pod {
	p := admissiontest.Pod(name, res(requests))
	for _, e := range edits {
		e(p)
	}
	return p
}

func container(name, requests string) v1.Container {
	return v1.Container{Name: name, Image: "busybox", Resources: v1.ResourceRequirements{Requests: res(requests)}}
}

func sidecar(name, requests string) v1.Container {
	c := container(name, requests)
	always := v1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func withInit(cs ...v1.Container) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.InitContainers = append(p.Spec.InitContainers, cs...) }
}

func withContainers(cs ...v1.Container) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.Containers = cs }
}

func withPhase(ph v1.PodPhase) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Status.Phase = ph }
}

func withLabels(kv ...string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

// decisionCase is one row of the admission tables.
type decisionCase struct {
	name string
	node admissiontest.Node
	pod  *v1.Pod
	// custom admitters appended after the built-ins.
	custom []nodekit.Admitter
	want   nodekit.Decision
}

func runDecisionCases(t *testing.T, cases []decisionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.node.Admit(context.Background(), tc.pod, tc.custom...)
			if got != tc.want {
				t.Errorf("decision\n got: %+v\nwant: %+v", got, tc.want)
			}
		})
	}
}

// reject builds the expected rejection.
func reject(reason, message string) nodekit.Decision {
	return nodekit.Decision{Reason: reason, Message: message}
}
