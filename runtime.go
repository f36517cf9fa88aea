package nodekit

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Runtime runs pods. It is the seam where a vendor plugs a backend: criruntime
// implements it over any CRI v1 endpoint; a vendor may run plain processes,
// VMs, or forward to a remote system.
//
// The Runtime executes; it does not decide. What to start, what to kill and
// when (restart policy, crash-loop and image-pull back-off, init-container
// order, probes) is decided by the caller, which hands the decision over as
// PodActions. So every Runtime gets the same pod semantics.
//
// Optional capabilities (container events, exec, log reopening, image GC,
// resource updates) are separate interfaces, declared by the packages that
// use them and found by type assertion.
type Runtime interface {
	// SyncPod carries out req.Actions for req.Pod: kill what is listed, create
	// the sandbox if asked, pull images, create and start the listed
	// containers in order. It blocks until every action has been tried (not
	// until containers exit), and never returns nil. A failed action does not
	// stop later independent ones; the result says which failed and why.
	// Calling it twice with the same actions starts containers twice: the
	// caller must recompute actions from a fresh status between calls.
	SyncPod(ctx context.Context, req SyncPodRequest) *SyncResult

	// KillPod stops every container of req.Running (regular containers
	// first, then restartable init containers in reverse order, as upstream),
	// each with its grace period, then stops the sandbox. It blocks until all
	// are stopped or ctx is done. It is idempotent: killing a stopped pod
	// succeeds. It does not remove anything (garbage collection does).
	KillPod(ctx context.Context, req KillPodRequest) error

	// ListPods returns the pods the runtime knows, grouped by pod UID. With
	// all=false only running containers and ready sandboxes are included. The
	// returned pods belong to the caller.
	ListPods(ctx context.Context, all bool) ([]*Pod, error)

	// GetPodStatus returns the full status of one pod: every sandbox and
	// every container (exited ones too), newest first. A pod the runtime does
	// not know yields an empty status, not an error. The result belongs to
	// the caller.
	//
	// The caller trusts it: each ContainerStatus.RestartCount is reported
	// as the container's restart count, so a runtime must count restarts
	// itself (one more than the previous instance of the same name); and a
	// ready sandbox of a pod not on the host network must report an IP, or
	// the caller asks for a new sandbox on every sync, as upstream does.
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*PodStatus, error)
}

// State is a container's state as the runtime reports it.
type State string

// Container states.
const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
	StateUnknown State = "unknown"
)

// SandboxState is a pod sandbox's state.
type SandboxState string

// Sandbox states.
const (
	SandboxReady    SandboxState = "ready"
	SandboxNotReady SandboxState = "notready"
)

// ContainerID names a container within a runtime type, printed as
// "type://id" (for example containerd://3f2a...), as in the pod status.
type ContainerID struct {
	Type string
	ID   string
}

// String returns "type://id", or "" for the zero ID.
func (c ContainerID) String() string {
	if c.ID == "" {
		return ""
	}
	return c.Type + "://" + c.ID
}

// IsEmpty reports whether c is the zero ID.
func (c ContainerID) IsEmpty() bool { return c.ID == "" }

// Pod is a pod as the runtime lists it.
type Pod struct {
	ID        types.UID
	Name      string
	Namespace string
	// CreatedAt is the creation time of the newest sandbox.
	CreatedAt  time.Time
	Containers []*Container
	// Sandboxes are listed like containers; their Name is empty.
	Sandboxes []*Container
}

// Container is a container (or sandbox) as the runtime lists it.
type Container struct {
	ID    ContainerID
	Name  string
	Image string
	// ImageID is the image's ID as the runtime knows it; ImageRef the
	// digested reference reported in the pod status.
	ImageID   string
	ImageRef  string
	Hash      uint64
	State     State
	CreatedAt time.Time
}

// PodStatus is what the runtime knows of one pod.
type PodStatus struct {
	ID        types.UID
	Name      string
	Namespace string
	// IPs of the newest sandbox, primary first.
	IPs []string
	// Sandboxes, newest first.
	Sandboxes []*SandboxStatus
	// Containers, every one the runtime still has, newest first.
	Containers []*ContainerStatus
	// TimeStamp is when this status was read; the pod cache uses it so a
	// worker can wait for a status newer than its last action.
	TimeStamp time.Time
}

// SandboxStatus is one pod sandbox.
type SandboxStatus struct {
	ID          string
	State       SandboxState
	CreatedAt   time.Time
	IPs         []string
	Attempt     uint32
	HostNetwork bool
}

// ContainerStatus is one container, running or not.
type ContainerStatus struct {
	ID           ContainerID
	Name         string
	State        State
	CreatedAt    time.Time
	StartedAt    time.Time
	FinishedAt   time.Time
	ExitCode     int
	Image        string
	ImageID      string
	ImageRef     string
	Hash         uint64
	RestartCount int
	// Reason and Message come from the runtime (for example OOMKilled).
	Reason  string
	Message string
	// LogPath is the container's log file on the node, in the CRI log
	// format, or "" when the runtime keeps no file.
	LogPath string
	// User is the identity the container's first process runs with (uid,
	// gid, supplementalGroups) as the runtime reports it; nil when the
	// runtime does not say. It becomes the API status's user.
	User *v1.ContainerUser
}

// FindContainer returns the newest status of the named container, or nil.
func (s *PodStatus) FindContainer(name string) *ContainerStatus {
	if s == nil {
		return nil
	}
	for _, c := range s.Containers {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// SyncPodRequest is everything SyncPod needs. The runtime must not modify
// any of it.
type SyncPodRequest struct {
	Pod *v1.Pod
	// Status is the newest status the caller saw, used to find the sandbox
	// and restart counts. Nil means none.
	Status  *PodStatus
	Actions PodActions
	// PullSecrets are the pod's image pull secrets, already fetched.
	PullSecrets []v1.Secret
	Sandbox     SandboxOptions
	// Options resolves the per-container settings that need the node
	// (environment, mounts, devices). Nil means none.
	Options ContainerOptionsFunc
}

// PodActions is the caller's decision for one SyncPod call.
type PodActions struct {
	// KillPod stops every container and the sandbox before anything else
	// (the sandbox changed or must be recreated).
	KillPod bool
	// CreateSandbox creates a new sandbox; otherwise SandboxID is used.
	CreateSandbox bool
	SandboxID     string
	// Attempt is the new sandbox's attempt number.
	Attempt uint32
	// InitContainersToStart are indexes into pod.Spec.InitContainers, started
	// in order; a failure stops the ones after it.
	InitContainersToStart []int
	// ContainersToStart are indexes into pod.Spec.Containers.
	ContainersToStart []int
	// EphemeralContainersToStart are indexes into
	// pod.Spec.EphemeralContainers; they start before init containers (so a
	// debugger can join a pod whose init containers fail) and never
	// restart.
	EphemeralContainersToStart []int
	// ContainersToKill are stopped before anything is started.
	ContainersToKill map[ContainerID]KillInfo
}

// KillInfo says why a container is being killed.
type KillInfo struct {
	Name string
	// Container is the spec, nil when it is no longer in the pod.
	Container *v1.Container
	// Reason is a CamelCase word for the container's status; Message a
	// sentence for the Killing event.
	Reason  string
	Message string
	// GracePeriod overrides the pod's when not nil (liveness-probe kills).
	GracePeriod *time.Duration
}

// KillPodRequest asks to stop a pod.
type KillPodRequest struct {
	// Pod is the spec, nil when unknown (an orphan found in the runtime).
	Pod *v1.Pod
	// Running is what to stop, as listed by ListPods or derived from a status.
	Running *Pod
	// GracePeriod overrides the one derived from the pod (deletion grace
	// period, else terminationGracePeriodSeconds) when not nil.
	GracePeriod *time.Duration
}

// SandboxOptions are the sandbox settings that come from the node rather
// than the pod spec.
type SandboxOptions struct {
	// Hostname and Domain for the pod; "" means the runtime derives the
	// hostname from the spec (hostname, else pod name).
	Hostname string
	Domain   string
	// DNS is the resolv.conf content; nil means the runtime's default.
	DNS *DNSConfig
	// CgroupParent is the pod's cgroup, "" for the runtime's default.
	CgroupParent string
	// RuntimeHandler selects a runtime class handler, "" for the default.
	RuntimeHandler string
}

// DNSConfig is the content of a pod's resolv.conf.
type DNSConfig struct {
	Servers  []string
	Searches []string
	Options  []string
}

// ContainerOptionsFunc resolves the node-side settings for a container about
// to be created. An error stops that container with CreateContainerConfigError.
type ContainerOptionsFunc func(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*ContainerOptions, error)

// ContainerOptions are the node-side settings of one container.
type ContainerOptions struct {
	Envs    []EnvVar
	Mounts  []Mount
	Devices []Device
	// CDIDevices are fully qualified CDI device names (vendor/class=name),
	// as DRA drivers and device plugins return them; the runtime passes
	// them to the container runtime, which applies their CDI specs.
	CDIDevices  []string
	Annotations map[string]string
	// PodContainerDir is where the runtime may keep per-container files such
	// as the termination-message file; "" disables them.
	PodContainerDir string
	// CPUSet and CPUSetMems pin the container to CPUs and NUMA memory nodes
	// (cpuset syntax, "0-3,8"), as the CPU and memory managers decide; ""
	// leaves the runtime's default.
	CPUSet     string
	CPUSetMems string
	// OOMScoreAdj is the container's oom_score_adj (by QoS class, as
	// upstream); nil leaves the runtime's default.
	OOMScoreAdj *int
}

// EnvVar is one resolved environment variable.
type EnvVar struct {
	Name  string
	Value string
}

// Mount is one resolved volume mount.
type Mount struct {
	Name          string
	ContainerPath string
	HostPath      string
	ReadOnly      bool
	// RecursiveReadOnly makes a read-only mount read-only below it too
	// (CRI recursive_read_only; the runtime handler must support it).
	RecursiveReadOnly bool
	// SELinuxRelabel asks the runtime to relabel HostPath with the
	// container's SELinux label (CRI selinux_relabel), as upstream does
	// for volumes it manages; a Runtime sends it only on a host with
	// SELinux enabled.
	SELinuxRelabel bool
	// Propagation is the upstream mount propagation mode; nil is private.
	Propagation *v1.MountPropagationMode
	// Image, when set, makes this the mount of an image volume
	// (volumes[].image): the reference as the pod spec writes it. HostPath
	// is then empty; the runtime pulls the image (the pod volume's pull
	// policy) and has the container runtime mount it, read-only.
	Image string
	// ImageSubPath is the directory inside the image to mount (the
	// volumeMount's subPath, expanded), "" for the whole image.
	ImageSubPath string
}

// Device is one host device exposed to a container.
type Device struct {
	PathOnHost      string
	PathInContainer string
	Permissions     string
}

// ContainerEventType is what a runtime reports happened to a container.
type ContainerEventType string

// Container event types, as in CRI.
const (
	ContainerCreatedEvent ContainerEventType = "created"
	ContainerStartedEvent ContainerEventType = "started"
	ContainerStoppedEvent ContainerEventType = "stopped"
	ContainerDeletedEvent ContainerEventType = "deleted"
)

// ContainerEvent is one event from a runtime that streams them (an optional
// capability: see pleg.ContainerEventer). Sandboxes report events too; their
// Container is the sandbox ID.
type ContainerEvent struct {
	PodID     types.UID
	Container ContainerID
	Type      ContainerEventType
	Time      time.Time
}
