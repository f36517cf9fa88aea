package syncloop

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// StatusManager is where the loop publishes pod statuses (package statusmgr
// implements it).
type StatusManager interface {
	// GetPodStatus returns the newest status the agent holds for the pod.
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
	// SetPodStatus records a newly computed status. An error means the
	// status was refused (for example an illegal transition); the loop
	// logs it and carries on.
	SetPodStatus(pod *v1.Pod, status v1.PodStatus) error
	// PodResourcesReclaimed says a terminated pod's containers, volumes and
	// directories are gone, so its API object may be deleted.
	PodResourcesReclaimed(uid types.UID) error
}

// PodTerminator is an optional capability of a StatusManager (package
// statusmgr has it): once a pod's containers are all stopped, TerminatePod
// marks those with no terminated state as terminated with an unknown
// status and makes a non-static pod's phase terminal, as upstream, so a
// pod whose containers never ran (an image that never pulled) can finish.
type PodTerminator interface {
	TerminatePod(pod *v1.Pod) error
}

// OrphanStatusRemover is an optional capability of a StatusManager
// (statusmgr.Manager has it): housekeeping asks it to forget the statuses
// of every pod not in keep (pods gone from the configuration whose
// workers are done). A StatusManager without it keeps them.
type OrphanStatusRemover interface {
	RemoveOrphanedStatuses(keep map[types.UID]bool)
}

// PhaseGetter is an optional capability of a StatusManager
// (statusmgr.Manager has it): the phase of the newest status the agent
// holds for the pod, without copying the status. ActivePods and
// NotTerminatedPods ask it for every pod, and they are asked for every pod
// admitted; without it they copy each pod's status through GetPodStatus.
type PhaseGetter interface {
	GetPodPhase(uid types.UID) (v1.PodPhase, bool)
}

// UpdateObserver is told of a known pod's spec update before the pod's
// worker sees it: old is the pod as the loop held it, updated the new one.
// It must not modify either and must not block (it runs on the loop's
// goroutine).
type UpdateObserver interface {
	ObservePodUpdate(ctx context.Context, old, updated *v1.Pod)
}

// Relister relists one pod at once (pleg.Generic and pleg.Evented
// implement it): the loop asks for it after a sync that changed the pod
// without error, so the pod's new state (its containers running) reaches
// the cache and the status without waiting for the periodic relist, as
// upstream's on-demand relist (PLEGOnDemandRelist, GA in v1.37).
type Relister interface {
	RequestRelist(ctx context.Context, uid types.UID, name, namespace string)
}

// MirrorClient creates and deletes the mirror pods of static pods. Nil
// means static pods get no mirror (standalone mode).
type MirrorClient interface {
	CreateMirrorPod(ctx context.Context, static *v1.Pod) error
	// DeleteMirrorPod deletes the mirror pod with the full name
	// (NAME_NAMESPACE, as upstream); with a uid, only if the mirror has
	// that UID. It reports whether it deleted one.
	DeleteMirrorPod(ctx context.Context, fullName string, uid *types.UID) (bool, error)
}

// VolumeManager mounts a pod's volumes before its containers start and
// waits for them to be unmounted after it terminates. Nil means the pod's
// volumes are not managed.
type VolumeManager interface {
	WaitForAttachAndMount(ctx context.Context, pod *v1.Pod) error
	WaitForUnmount(ctx context.Context, pod *v1.Pod) error
}

// DynamicResources prepares the pod's DRA ResourceClaims before its
// containers start and releases them once they have stopped (package dra
// implements it). Both are idempotent; an error from PrepareResources is
// a sync error the worker retries (event FailedPrepareDynamicResources).
// Nil means claims are not prepared: an agent must then refuse pods with
// claims in admission (admission.PodFeatures does).
type DynamicResources interface {
	PrepareResources(ctx context.Context, pod *v1.Pod) error
	UnprepareResources(ctx context.Context, pod *v1.Pod) error
}

// ResourceHealth reports the health of the devices allocated to a pod's
// containers, for their status's allocatedResourcesStatus (packages
// devicemgr and dra implement it; the ResourceHealthStatus gate decides
// whether an agent passes them).
type ResourceHealth interface {
	// AllocatedResourcesStatus returns the health of the devices the
	// named regular container of pod holds, one entry per resource name;
	// nil when it holds none. It must not block.
	AllocatedResourcesStatus(pod *v1.Pod, container string) []v1.ResourceStatus
}

// VolumeCleaner is an optional capability of a VolumeManager
// (volumemgr.Manager has it): housekeeping asks it to tear down the
// volumes of every pod not in keep (pods found on disk after a restart,
// orphans killed without a spec) before their directories are removed.
type VolumeCleaner interface {
	CleanupPods(keep map[types.UID]bool)
}

// SecretGetter reads image pull secrets.
type SecretGetter interface {
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// PodLister lists the runtime's pods as nodekit.Runtime's ListPods does
// (all=false: running sandboxes and containers only).
type PodLister interface {
	ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error)
}

// MountLister lists the host's mount points (paths, in mount order), for
// housekeeping, which never removes a pod directory with something still
// mounted below it. volumemgr.HostMounter's MountPoints, adapted, is one.
type MountLister interface {
	MountPaths(ctx context.Context) ([]string, error)
}

// EventRecorder records events; client-go's record.EventRecorder fits.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

type discardEvents struct{}

func (discardEvents) Eventf(runtime.Object, string, string, string, ...interface{}) {}

// ProbeWorkers runs the probes of the pods the loop syncs (package probes
// implements it). Nil means no probes run.
type ProbeWorkers interface {
	// AddPod starts workers for the pod's probes; called on every sync of
	// a running pod, so it must be idempotent.
	AddPod(ctx context.Context, pod *v1.Pod)
	// StopLivenessAndStartup stops the probes that could kill containers of
	// a terminating pod.
	StopLivenessAndStartup(pod *v1.Pod)
	// RemovePod stops every worker of the pod.
	RemovePod(pod *v1.Pod)
	// CleanupPods stops the workers of pods not in desired.
	CleanupPods(desired map[types.UID]bool)
}

// HookRunner runs a container lifecycle handler (postStart, preStop).
// Package probes implements it.
type HookRunner interface {
	Run(ctx context.Context, pod *v1.Pod, c *v1.Container, id nodekit.ContainerID, podIP string, h *v1.LifecycleHandler) (string, error)
}

// Metrics receives the loop's numbers, as upstream's pod workers report
// them. server.AgentMetrics satisfies it.
type Metrics interface {
	// ObservePodWorker records one worker step by operation_type
	// (create, update, sync, kill, terminated).
	ObservePodWorker(operation string, d time.Duration)
	// ObservePodStarted records a pod's first Running status at running;
	// firstSeen is when the configuration first saw it (zero: unknown).
	ObservePodStarted(pod *v1.Pod, firstSeen, running time.Time)
	// ForgetPod drops what is kept for a pod that has finished.
	ForgetPod(uid types.UID)
}

type noMetrics struct{}

func (noMetrics) ObservePodWorker(string, time.Duration)          {}
func (noMetrics) ObservePodStarted(*v1.Pod, time.Time, time.Time) {}
func (noMetrics) ForgetPod(types.UID)                             {}
