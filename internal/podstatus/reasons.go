package podstatus

// Condition reasons, as upstream's status package writes them.
const (
	// ReasonUnknownContainerStatuses: no container status is known at all.
	ReasonUnknownContainerStatuses = "UnknownContainerStatuses"
	// ReasonPodCompleted: every container of the pod succeeded.
	ReasonPodCompleted = "PodCompleted"
	// ReasonPodFailed: the pod failed, so its containers are not ready.
	ReasonPodFailed = "PodFailed"
	// ReasonContainersNotReady: a container is not ready or not known.
	ReasonContainersNotReady = "ContainersNotReady"
	// ReasonContainersNotInitialized: an init container has not completed
	// (or a sidecar has not started).
	ReasonContainersNotInitialized = "ContainersNotInitialized"
	// ReasonReadinessGatesNotReady: the containers are ready but a
	// readiness gate's condition is missing or not True.
	ReasonReadinessGatesNotReady = "ReadinessGatesNotReady"
	// ReasonPodSandboxNotReady: the pod needs a new sandbox before its
	// containers can start (PodReadyToStartContainers False).
	ReasonPodSandboxNotReady = "PodSandboxNotReady"
)

// Messages of PodReadyToStartContainers False, one per reason a new sandbox
// is needed.
const (
	MessageNoSandbox          = "no pod sandbox exists"
	MessageMultipleSandboxes  = "multiple pod sandboxes are ready and need to be reconciled"
	MessageSandboxNotReady    = "pod sandbox is not ready"
	MessageNetworkModeChanged = "network namespace mode changed and sandbox needs to be recreated"
	MessageSandboxNoIPAddress = "pod sandbox has no IP address"
)

// Container state reasons the node agent writes itself.
const (
	// ReasonContainerCreating: a container waits for its first start.
	ReasonContainerCreating = "ContainerCreating"
	// ReasonPodInitializing: in a pod with init containers, a container
	// that has not started yet waits with this reason.
	ReasonPodInitializing = "PodInitializing"
	// ReasonCompleted and ReasonError: a terminated container the runtime
	// gave no reason for, by its exit code (0 or not).
	ReasonCompleted = "Completed"
	ReasonError     = "Error"
	// ReasonContainerStatusUnknown: the container is gone and its end was
	// never seen; see UnknownTermination.
	ReasonContainerStatusUnknown = "ContainerStatusUnknown"
	// MessageContainerNotLocated goes with ReasonContainerStatusUnknown.
	MessageContainerNotLocated = "The container could not be located when the pod was terminated"
	// ExitCodeUnknownTermination is the exit code of such a container.
	ExitCodeUnknownTermination = 137
)
