package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/admission/admissiontest"
	"github.com/nodekit/nodekit/agenttest"
)

// teamPod is a pod of the team (none when ""), requesting cpu (none when "").
func teamPod(name, team, cpu string) *v1.Pod {
	req := v1.ResourceList{}
	if cpu != "" {
		req = admissiontest.Resources("cpu=" + cpu)
	}
	p := admissiontest.Pod(name, req)
	if team != "" {
		p.Labels = map[string]string{teamLabel: team}
	}
	return p
}

// The policy through the same chain the agent runs, on a node described
// in a few lines: the built-ins decide first.
func TestTeamQuota(t *testing.T) {
	quota := teamQuota{Quotas: map[string]int{"payments": 2, "frozen": 0}, Default: 1}
	finished := teamPod("old-batch", "batch", "")
	finished.Status.Phase = v1.PodSucceeded
	node := admissiontest.Node{
		Allocatable: admissiontest.Resources("cpu=2,memory=4Gi"),
		Pods:        []*v1.Pod{teamPod("checkout", "payments", "500m"), teamPod("search", "search", "500m"), finished},
	}
	system := teamPod("dns", "", "")
	system.Namespace = metav1.NamespaceSystem

	for _, tc := range []struct {
		name       string
		pod        *v1.Pod
		wantReason string // "" means admitted
	}{
		{"under its quota", teamPod("refunds", "payments", "100m"), ""},
		{"at its quota", teamPod("ranker", "search", ""), ReasonQuotaExceeded},
		{"a team with the default quota", teamPod("etl", "data", ""), ""},
		{"a team with quota zero", teamPod("legacy", "frozen", ""), ReasonQuotaExceeded},
		{"finished pods do not count", teamPod("batch-2", "batch", ""), ""},
		{"no team label", teamPod("scratch", "", ""), ReasonMissingTeam},
		{"kube-system is exempt", system, ""},
		{"the built-ins decide first", teamPod("huge", "", "4"), "OutOfcpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := node.Admit(context.Background(), tc.pod, quota)
			if d.Admit != (tc.wantReason == "") || d.Reason != tc.wantReason {
				t.Fatalf("decision %+v, want reason %q", d, tc.wantReason)
			}
			if !d.Admit && d.Message == "" {
				t.Error("a rejection without a message")
			}
		})
	}
}

// In an agent the policy runs in the sync loop (here agenttest's simulated
// node): a rejected pod fails with the policy's reason and never reaches
// the runtime; once a pod of the team is gone there is room again.
func TestTeamQuotaInTheSyncLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := admissiontest.Node{Allocatable: admissiontest.Resources("cpu=4,memory=8Gi")}.Object()
		admitters := append(admission.Builtins(admission.NodeFunc(func(context.Context) (*v1.Node, error) { return node, nil })),
			teamQuota{Default: 1})
		n := agenttest.StartSimNode(t, agenttest.SimOptions{Admitters: admitters})

		first, second, third := teamPod("a", "web", ""), teamPod("b", "web", ""), teamPod("c", "web", "")
		for _, p := range []*v1.Pod{first, second, third} {
			p.CreationTimestamp = metav1.Now()
			p.Spec.TerminationGracePeriodSeconds = new(int64)
		}
		n.AddPod(first)
		n.Settle(2 * time.Second)
		n.AddPod(second)
		n.Settle(2 * time.Second)
		if st, _ := n.Status(first.UID); st.Phase != v1.PodRunning {
			t.Fatalf("first pod: %s", st.Phase)
		}
		st, _ := n.Status(second.UID)
		if st.Phase != v1.PodFailed || st.Reason != ReasonQuotaExceeded || !strings.Contains(st.Message, `team "web" already runs 1 of its 1 pods`) {
			t.Fatalf("second pod: %+v", st)
		}
		for _, c := range n.Runtime().Calls() {
			if strings.Contains(c, "/b") {
				t.Fatalf("the runtime saw the rejected pod: %s", c)
			}
		}

		n.DeletePod(first)
		n.Settle(5 * time.Second)
		n.AddPod(third)
		n.Settle(2 * time.Second)
		if st, _ := n.Status(third.UID); st.Phase != v1.PodRunning {
			t.Fatalf("third pod after the first was deleted: %+v", st)
		}
	})
}

// The command admits the testdata manifests in order.
func TestRun(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata: %v %v", files, err)
	}
	var out strings.Builder
	args := append([]string{"-cpu", "2", "-memory", "4Gi", "-quota", "payments=1,search=2"}, files...)
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatal(err)
	}
	want := `default/checkout: admitted
default/refunds: rejected TeamQuotaExceeded: team "payments" already runs 1 of its 1 pods on this node
default/scratch: rejected MissingTeamLabel: pods on this node need a "team" label
default/trainer: rejected OutOfcpu: Node didn't have enough resource: cpu, requested: 8000, used: 500, capacity: 2000
kube-system/dns: admitted
default/indexer: admitted
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	for _, bad := range [][]string{{"-quota", "payments"}, {"-cpu", "lots"}, {"testdata/missing.yaml"}} {
		if err := run(context.Background(), bad, &strings.Builder{}); err == nil {
			t.Errorf("run %q succeeded", bad)
		}
	}
}
