// Package podstatus makes every decision about a pod's API status that the
// sync loop and the status manager share: the phase (restart policy,
// container restart rules, init containers and sidecars, terminal phases),
// the conditions the node agent owns (PodReadyToStartContainers,
// Initialized, ContainersReady, Ready with its readiness gates,
// PodScheduled, AllContainersRestarting for a pod with a RestartAllContainers
// rule), which condition types the agent owns, when conditions
// change their lastTransitionTime, and the reasons and messages written
// into a status. It follows kubelet v1.37 (status/generate.go and getPhase
// in kubelet_pods.go) with the gates nodekit runs on: ContainerRestartRules,
// RestartAllContainersOnContainerExits (see internal/restartrules),
// PodReadyToStartContainersCondition and PodObservedGenerationTracking on,
// so every generated condition carries the pod's generation.
//
// It holds pure functions only: no goroutines, no locks, no clock (callers
// pass the time). It does not convert a runtime's view of containers into
// container statuses (the sync loop does), keep or publish statuses (the
// status manager does), or decide conditions other parts own: resize
// conditions and the like come in through Input.Extra and are kept as given.
//
//	res := podstatus.Generate(podstatus.Input{Pod: pod, Old: &old,
//		InitContainers: inits, Containers: regular, Sandboxes: rs.Sandboxes,
//		Initialized: anyRegularStarted, Now: now})
//	status.Phase, status.Reason, status.Message = res.Phase, res.Reason, res.Message
//	status.Conditions = res.Conditions
package podstatus
