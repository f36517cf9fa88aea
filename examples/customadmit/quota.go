package main

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
)

// teamLabel names the team a pod belongs to.
const teamLabel = "team"

// Reasons teamQuota rejects pods with; they end up in the pod's
// status.reason.
const (
	ReasonMissingTeam   = "MissingTeamLabel"
	ReasonQuotaExceeded = "TeamQuotaExceeded"
)

// teamQuota is a node-local policy: every pod must carry a team label, and
// a team may run only so many pods on this node. Pods in kube-system are
// exempt. It is a nodekit.Admitter; in an agent it goes after the
// built-ins, so that a pod that cannot fit is told so first:
//
//	admitters := append(admission.Builtins(node), teamQuota{Default: 5})
//	loop, _ := syncloop.New(syncloop.Config{Admitters: admitters, ...})
type teamQuota struct {
	// Quotas is the number of pods each team may run here.
	Quotas map[string]int
	// Default is the quota of a team not in Quotas.
	Default int
}

var _ nodekit.Admitter = teamQuota{}

// Admit counts the admitted pods of the pod's team; finished pods do not
// count. It only reads the request.
func (q teamQuota) Admit(_ context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod.Namespace == metav1.NamespaceSystem {
		return nodekit.Admitted
	}
	team := req.Pod.Labels[teamLabel]
	if team == "" {
		return nodekit.Decision{Reason: ReasonMissingTeam,
			Message: fmt.Sprintf("pods on this node need a %q label", teamLabel)}
	}
	quota, ok := q.Quotas[team]
	if !ok {
		quota = q.Default
	}
	running := 0
	for _, p := range req.Pods {
		if p.Labels[teamLabel] == team && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			running++
		}
	}
	if running >= quota {
		return nodekit.Decision{Reason: ReasonQuotaExceeded,
			Message: fmt.Sprintf("team %q already runs %d of its %d pods on this node", team, running, quota)}
	}
	return nodekit.Admitted
}
