package statusmgr

import (
	"context"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionState is what a ConditionProvider reports; the NodeReporter adds
// the type and the heartbeat and transition times.
type ConditionState struct {
	Status  v1.ConditionStatus
	Reason  string
	Message string
}

// ConditionProvider reports the current state of one node condition.
type ConditionProvider interface {
	// NodeCondition is called on every node status computation (every
	// 10 s by default); it should answer from state it keeps, not block on
	// slow I/O. An empty Status counts as Unknown.
	NodeCondition(ctx context.Context) ConditionState
}

// ConditionFunc adapts a function to ConditionProvider.
type ConditionFunc func(ctx context.Context) ConditionState

// NodeCondition implements ConditionProvider.
func (f ConditionFunc) NodeCondition(ctx context.Context) ConditionState { return f(ctx) }

// ReadinessChecker reports whether one part the node needs (the container
// runtime, its network, storage) works. criruntime.Runtime satisfies it.
type ReadinessChecker interface {
	// Ready returns nil when ready, else an error saying why not.
	Ready(ctx context.Context) error
}

// ReadinessFunc adapts a function to ReadinessChecker.
type ReadinessFunc func(ctx context.Context) error

// Ready implements ReadinessChecker.
func (f ReadinessFunc) Ready(ctx context.Context) error { return f(ctx) }

var (
	_ ConditionProvider = ConditionFunc(nil)
	_ ReadinessChecker  = ReadinessFunc(nil)
)

// Reasons and messages of the node conditions, as upstream words them.
const (
	reasonKubeletReady    = "KubeletReady"
	reasonKubeletNotReady = "KubeletNotReady"
	messageKubeletReady   = "kubelet is posting ready status"
)

// ReadyCondition is the provider of the Ready condition: True with reason
// KubeletReady while every check passes, else False with reason
// KubeletNotReady and the failures' messages joined. With no checks the node
// is always ready. (The NodeReporter also reports not ready while a
// capacity is missing.)
func ReadyCondition(checks ...ReadinessChecker) ConditionProvider {
	return ConditionFunc(func(ctx context.Context) ConditionState {
		var msgs []string
		for _, c := range checks {
			if err := c.Ready(ctx); err != nil {
				msgs = append(msgs, err.Error())
			}
		}
		if len(msgs) > 0 {
			return ConditionState{Status: v1.ConditionFalse, Reason: reasonKubeletNotReady, Message: strings.Join(msgs, "; ")}
		}
		return ConditionState{Status: v1.ConditionTrue, Reason: reasonKubeletReady, Message: messageKubeletReady}
	})
}

// pressureWords returns the reasons and messages of pressure condition t:
// under pressure, then not.
func pressureWords(t v1.NodeConditionType) [4]string {
	switch t {
	case v1.NodeMemoryPressure:
		return [4]string{"KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
			"KubeletHasSufficientMemory", "kubelet has sufficient memory available"}
	case v1.NodeDiskPressure:
		return [4]string{"KubeletHasDiskPressure", "kubelet has disk pressure",
			"KubeletHasNoDiskPressure", "kubelet has no disk pressure"}
	case v1.NodePIDPressure:
		return [4]string{"KubeletHasInsufficientPID", "kubelet has insufficient PID available",
			"KubeletHasSufficientPID", "kubelet has sufficient PID available"}
	}
	return [4]string{"Kubelet" + string(t), "kubelet reports " + string(t),
		"KubeletNo" + string(t), "kubelet reports no " + string(t)}
}

// PressureCondition is the provider of a pressure condition
// (MemoryPressure, DiskPressure, PIDPressure or a custom one): True while
// underPressure says so, else False, with upstream's reasons and messages
// for the three standard types. A nil underPressure never reports
// pressure.
func PressureCondition(t v1.NodeConditionType, underPressure func(ctx context.Context) bool) ConditionProvider {
	words := pressureWords(t)
	return ConditionFunc(func(ctx context.Context) ConditionState {
		if underPressure != nil && underPressure(ctx) {
			return ConditionState{Status: v1.ConditionTrue, Reason: words[0], Message: words[1]}
		}
		return ConditionState{Status: v1.ConditionFalse, Reason: words[2], Message: words[3]}
	})
}

// conditionOrder lists the condition types a NodeReporter maintains: the
// pressure conditions, custom ones by name, Ready last (older clients read
// the last condition as the node's readiness).
func conditionOrder(providers map[v1.NodeConditionType]ConditionProvider) []v1.NodeConditionType {
	order := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}
	var custom []v1.NodeConditionType
	for t := range providers {
		if t != v1.NodeReady && !slices.Contains(order, t) {
			custom = append(custom, t)
		}
	}
	slices.Sort(custom)
	return append(append(order, custom...), v1.NodeReady)
}

// setNodeCondition writes condition t with state st into node: heartbeat
// now, transition time kept while the status does not change. A new
// condition is appended.
func setNodeCondition(node *v1.Node, t v1.NodeConditionType, st ConditionState, now metav1.Time) {
	if st.Status == "" {
		st.Status = v1.ConditionUnknown
	}
	c := v1.NodeCondition{Type: t, Status: st.Status, Reason: st.Reason, Message: st.Message, LastHeartbeatTime: now, LastTransitionTime: now}
	for i := range node.Status.Conditions {
		old := &node.Status.Conditions[i]
		if old.Type != t {
			continue
		}
		if old.Status == c.Status && !old.LastTransitionTime.IsZero() {
			c.LastTransitionTime = old.LastTransitionTime
		}
		*old = c
		return
	}
	node.Status.Conditions = append(node.Status.Conditions, c)
}
